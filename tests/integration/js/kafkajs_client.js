#!/usr/bin/env node
// kafkajs driver for tests/integration/test_kafkajs.py: one step of a client story per run.
//
//   node kafkajs_client.js <bootstrap> <step> '<json args>'
//
// Prints one JSON document on stdout (what the step saw) and exits 0; on any kafkajs error it
// prints {"error": name, "message": ..., "type": ...} and exits 1, so the Python test reports the
// client's own words. The script asserts nothing itself: every check lives in the Python test,
// which is where a regression must fail. kafkajs logs go to stderr (level WARN) for diagnosis.
'use strict'

const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

const { bootstrap, runSteps } = require('./driver')

const kafka = new Kafka({
  clientId: 'kompakt-kafkajs-test',
  brokers: [bootstrap],
  logLevel: logLevel.WARN,
  // retries stay short: a broker that answers wrongly must fail the test quickly, not after 30 s
  retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1000 },
  connectionTimeout: 5000,
  requestTimeout: 15000,
  logCreator: () => ({ namespace, level, label, log }) => {
    process.stderr.write(`[kafkajs ${label} ${namespace}] ${log.message} ${JSON.stringify(log)}\n`)
  },
})

const str = buf => (buf === null || buf === undefined ? null : buf.toString('utf8'))
const headersOut = headers => {
  const out = {}
  for (const [k, v] of Object.entries(headers || {})) {
    out[k] = Array.isArray(v) ? v.map(str) : str(v)
  }
  return out
}

async function withAdmin(fn) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    return await fn(admin)
  } finally {
    await admin.disconnect()
  }
}

// -- steps -------------------------------------------------------------------------------------------

// Admin APIs: CreateTopics (with configs), ListTopics/Metadata, DescribeConfigs, AlterConfigs,
// CreatePartitions, DescribeCluster, ListOffsets (latest, earliest, by timestamp), DeleteTopics.
async function admin({ topic, doomed }) {
  return withAdmin(async admin => {
    const report = {}
    report.created = await admin.createTopics({
      topics: [
        {
          topic,
          numPartitions: 3,
          configEntries: [
            { name: 'cleanup.policy', value: 'compact' },
            { name: 'segment.bytes', value: '1048576' },
          ],
        },
        { topic: doomed, numPartitions: 1 },
      ],
    })
    // creating an existing topic: kafkajs answers false (TOPIC_ALREADY_EXISTS is not an error)
    report.createdAgain = await admin.createTopics({ topics: [{ topic, numPartitions: 3 }] })
    report.listed = (await admin.listTopics()).sort()
    const meta = await admin.fetchTopicMetadata({ topics: [topic, doomed] })
    report.metadata = meta.topics.map(t => ({
      name: t.name,
      partitions: t.partitions
        .map(p => ({ partitionId: p.partitionId, leader: p.leader, replicas: p.replicas, isr: p.isr }))
        .sort((a, b) => a.partitionId - b.partitionId),
    }))
    report.cluster = await admin.describeCluster()

    const described = await admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: 2 /* TOPIC */, name: topic }],
    })
    report.topicConfigs = Object.fromEntries(
      described.resources[0].configEntries.map(e => [e.configName, { value: e.configValue, isDefault: e.isDefault }])
    )
    report.topicConfigError = described.resources[0].errorCode

    await admin.alterConfigs({
      resources: [{ type: 2, name: topic, configEntries: [{ name: 'retention.ms', value: '86400000' }] }],
    })
    const after = await admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: 2, name: topic, configNames: ['retention.ms', 'cleanup.policy'] }],
    })
    report.alteredConfigs = Object.fromEntries(
      after.resources[0].configEntries.map(e => [e.configName, e.configValue])
    )

    const broker = await admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: 4 /* BROKER */, name: String(report.cluster.brokers[0].nodeId), configNames: ['log.cleaner.enable'] }],
    })
    report.brokerConfigs = Object.fromEntries(
      broker.resources[0].configEntries.map(e => [e.configName, e.configValue])
    )

    await admin.createPartitions({ topicPartitions: [{ topic: doomed, count: 2 }] })
    report.doomedPartitions = (await admin.fetchTopicMetadata({ topics: [doomed] })).topics[0].partitions.length

    await admin.deleteTopics({ topics: [doomed] })
    report.listedAfterDelete = (await admin.listTopics()).sort()
    return report
  })
}

// Produce `count` keyed messages with two headers each, `compression` (GZIP | None), as
// `batches` sendBatch calls; returns what was sent and the offsets the broker acknowledged.
async function produce({ topic, count, start = 0, batches = 3, compression = 'GZIP', idempotent = false, timestamp }) {
  const producer = kafka.producer({ idempotent, maxInFlightRequests: idempotent ? 1 : undefined, allowAutoTopicCreation: false })
  await producer.connect()
  const sent = []
  const acks = []
  try {
    const per = Math.ceil(count / batches)
    for (let b = 0; b < batches; b++) {
      const messages = []
      for (let i = start + b * per; i < Math.min(start + count, start + (b + 1) * per); i++) {
        const m = {
          key: `key-${i % 20}`,
          value: `value-${i}`,
          headers: { seq: String(i), origin: 'kafkajs' },
        }
        if (timestamp !== undefined) m.timestamp = String(timestamp + i)
        messages.push(m)
        sent.push({ key: m.key, value: m.value, headers: m.headers, timestamp: m.timestamp || null })
      }
      if (messages.length === 0) continue
      const meta = await producer.sendBatch({
        acks: -1,
        compression: CompressionTypes[compression],
        topicMessages: [{ topic, messages }],
      })
      for (const m of meta) acks.push({ partition: m.partition, baseOffset: m.baseOffset, errorCode: m.errorCode, logAppendTime: m.logAppendTime })
    }
  } finally {
    await producer.disconnect()
  }
  return { sent, acks }
}

// A consumer group of `members` members reading `topic` from the beginning until `expect`
// messages arrived in total; each member commits after every batch (autoCommit) and leaves.
async function group({ topic, groupId, members = 2, expect, timeoutMs = 30000 }) {
  const consumers = []
  const seen = []
  const joins = []
  let done
  const allSeen = new Promise(resolve => (done = resolve))
  for (let n = 0; n < members; n++) {
    const consumer = kafka.consumer({
      groupId,
      sessionTimeout: 10000,
      heartbeatInterval: 500,
      maxWaitTimeInMs: 100,
      retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1000 },
    })
    consumer.on(consumer.events.GROUP_JOIN, e => joins.push({ member: n, ...e.payload }))
    consumer.on(consumer.events.CRASH, e => done(`crash: ${e.payload.error.name}: ${e.payload.error.message}`))
    consumers.push(consumer)
  }
  const timer = setTimeout(() => done('timeout'), timeoutMs)
  await Promise.all(consumers.map(c => c.connect()))
  await Promise.all(consumers.map(c => c.subscribe({ topics: [topic], fromBeginning: true })))
  // run both at once: the broker's group.initial.rebalance.delay.ms collects them into one generation
  await Promise.all(
    consumers.map((c, n) =>
      c.run({
        eachMessage: async ({ topic: t, partition, message }) => {
          seen.push({
            member: n,
            topic: t,
            partition,
            offset: message.offset,
            key: str(message.key),
            value: str(message.value),
            headers: headersOut(message.headers),
            timestamp: message.timestamp,
          })
          if (seen.length >= expect) done('complete')
        },
      })
    )
  )
  const outcome = await allSeen
  clearTimeout(timer)
  // disconnect commits the resolved offsets, then LeaveGroup
  await Promise.all(consumers.map(c => c.disconnect()))
  return { outcome, seen, joins }
}

async function fetchOffsets({ groupId, topics }) {
  return withAdmin(async admin => ({
    offsets: await admin.fetchOffsets({ groupId, topics }),
    topicOffsets: Object.fromEntries(
      await Promise.all(topics.map(async t => [t, await admin.fetchTopicOffsets(t)]))
    ),
  }))
}

// A transactional producer's story: a transaction over two topics that also commits a group's
// offsets (sendOffsets), committed; one aborted; one more committed. Then a read_committed consumer
// (kafkajs' default) reads `topic` from the start until it has seen `expect` records (or times
// out), and the admin client fetches the group's committed offsets. Reports what each saw.
async function transaction({ topic, other, groupId, expect, timeoutMs = 20000 }) {
  const producer = kafka.producer({ transactionalId: 'kompakt-tx', idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const outcomes = []
  try {
    const tx1 = await producer.transaction()
    await tx1.send({ topic, messages: [{ key: 'a', value: 'committed-1' }, { key: 'b', value: 'committed-2' }] })
    await tx1.send({ topic: other, messages: [{ key: 'c', value: 'other-1' }] })
    await tx1.sendOffsets({ consumerGroupId: groupId, topics: [{ topic: other, partitions: [{ partition: 0, offset: '1' }] }] })
    await tx1.commit()
    outcomes.push('committed')
    const tx2 = await producer.transaction()
    await tx2.send({ topic, messages: [{ key: 'x', value: 'aborted-1' }] })
    await tx2.sendOffsets({ consumerGroupId: groupId, topics: [{ topic: other, partitions: [{ partition: 0, offset: '99' }] }] })
    await tx2.abort()
    outcomes.push('aborted')
    const tx3 = await producer.transaction()
    await tx3.send({ topic, messages: [{ key: 'z', value: 'committed-3' }] })
    await tx3.commit()
    outcomes.push('committed')
  } finally {
    await producer.disconnect()
  }
  const consumer = kafka.consumer({ groupId: `${groupId}-reader`, maxWaitTimeInMs: 50 })
  const values = []
  let done
  const finished = new Promise(resolve => (done = resolve))
  const timer = setTimeout(() => done('timeout'), timeoutMs)
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ message }) => {
      values.push(str(message.value))
      if (values.length >= expect) done('complete')
    },
  })
  const outcome = await finished
  clearTimeout(timer)
  await consumer.disconnect()
  const offsets = await withAdmin(admin => admin.fetchOffsets({ groupId, topics: [other] }))
  return { outcomes, outcome, values, offsets }
}

// Try to join `groupId` (subscribed to `topic`): 'joined' on GROUP_JOIN, or how the consumer
// crashed (e.g. INCONSISTENT_GROUP_PROTOCOL when the members' assignors share no name with
// kafkajs' RoundRobinAssigner).
async function joinGroup({ groupId, topic, timeoutMs = 15000 }) {
  const consumer = kafka.consumer({ groupId, retry: { retries: 0 }, heartbeatInterval: 500, sessionTimeout: 10000 })
  let done
  const outcome = new Promise(resolve => (done = resolve))
  const timer = setTimeout(() => done({ outcome: 'timeout' }), timeoutMs)
  consumer.on(consumer.events.GROUP_JOIN, () => done({ outcome: 'joined' }))
  consumer.on(consumer.events.CRASH, e =>
    done({ outcome: 'crashed', errorName: e.payload.error.name, errorType: e.payload.error.type || null })
  )
  await consumer.connect()
  await consumer.subscribe({ topics: [topic] })
  consumer.run({ eachMessage: async () => {} }).catch(e =>
    done({ outcome: 'crashed', errorName: e.name, errorType: e.type || null })
  )
  const result = await outcome
  clearTimeout(timer)
  await consumer.disconnect()
  return result
}

// Admin setOffsets: commits for an empty group (OffsetCommit from outside the group, generation -1)
async function setOffsets({ groupId, topic, partitions }) {
  return withAdmin(async admin => {
    await admin.setOffsets({ groupId, topic, partitions })
    return { offsets: await admin.fetchOffsets({ groupId, topics: [topic] }) }
  })
}

async function groups({ groupIds }) {
  return withAdmin(async admin => ({
    listed: (await admin.listGroups()).groups,
    described: (await admin.describeGroups(groupIds)).groups.map(g => ({
      groupId: g.groupId,
      state: g.state,
      protocolType: g.protocolType,
      members: g.members.length,
      errorCode: g.errorCode,
    })),
  }))
}

async function deleteGroups({ groupIds }) {
  return withAdmin(async admin => {
    let deleted
    let failed = []
    try {
      deleted = await admin.deleteGroups(groupIds)
    } catch (e) {
      // kafkajs throws KafkaJSDeleteGroupsError carrying the groups that failed
      if (!e.groups) throw e
      deleted = []
      failed = e.groups
    }
    const brief = g => ({ groupId: g.groupId, errorCode: g.errorCode, error: g.error ? g.error.type : null })
    return {
      deleted: deleted.map(brief),
      failed: failed.map(brief),
      listed: (await admin.listGroups()).groups.map(g => g.groupId).sort(),
    }
  })
}

async function createTopic({ topic, numPartitions = 1, configs = {} }) {
  return withAdmin(async admin => ({
    created: await admin.createTopics({
      topics: [{ topic, numPartitions, configEntries: Object.entries(configs).map(([name, value]) => ({ name, value })) }],
    }),
  }))
}

// offsets of the first message at or after a timestamp, and DeleteRecords then ListOffsets earliest
async function offsetsByTime({ topic, timestamp, deleteBelow }) {
  return withAdmin(async admin => {
    const report = {}
    report.byTimestamp = await admin.fetchTopicOffsetsByTimestamp(topic, timestamp)
    if (deleteBelow !== undefined) {
      await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: String(deleteBelow) }] })
    }
    report.after = await admin.fetchTopicOffsets(topic)
    return report
  })
}

// Explicit records for the cross-client test. `jobs`: [{topic, compression, batches}], each batch a
// list of {partition, key, value, headers: [[k, v], ...], timestamp} sent by one sendBatch; null
// key/value are sent as null. One producer (one process start) for all jobs.
async function send({ jobs }) {
  const producer = kafka.producer({ allowAutoTopicCreation: false })
  await producer.connect()
  const acks = []
  try {
    for (const { topic, compression = 'None', batches } of jobs) {
      for (const batch of batches) {
        const messages = batch.map(r => {
          const headers = {}
          for (const [k, v] of r.headers || []) {
            // kafkajs sends an array value as repeated headers of one key, in order
            headers[k] = headers[k] === undefined ? v : [].concat(headers[k], [v])
          }
          const m = { partition: r.partition, key: r.key, value: r.value, headers }
          if (r.timestamp !== null && r.timestamp !== undefined) m.timestamp = String(r.timestamp)
          return m
        })
        const meta = await producer.sendBatch({ acks: -1, compression: CompressionTypes[compression], topicMessages: [{ topic, messages }] })
        for (const m of meta) acks.push({ topic, partition: m.partition, baseOffset: m.baseOffset, errorCode: m.errorCode })
      }
    }
  } finally {
    await producer.disconnect()
  }
  return { acks }
}

// Read `ends` ({topic: {partition: endOffset}}) completely from the beginning through a fresh
// group; every record with its offset, key, value, headers, timestamp and timestamp type.
async function read({ ends, groupId, timeoutMs = 30000 }) {
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 50, heartbeatInterval: 500, sessionTimeout: 10000 })
  const records = []
  const pending = new Set()
  for (const [t, parts] of Object.entries(ends)) {
    for (const [p, end] of Object.entries(parts)) if (end > 0) pending.add(`${t}/${p}`)
  }
  let done
  const finished = new Promise(resolve => (done = resolve))
  const timer = setTimeout(() => done('timeout'), timeoutMs)
  if (pending.size === 0) done('complete')
  // a consumer that cannot decode a fetch (e.g. a codec kafkajs lacks) crashes: report it at once
  consumer.on(consumer.events.CRASH, e => done(`crash: ${e.payload.error.name}: ${e.payload.error.message}`))
  await consumer.connect()
  await consumer.subscribe({ topics: Object.keys(ends), fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic, partition, message }) => {
      records.push({
        topic,
        partition,
        offset: Number(message.offset),
        key: str(message.key),
        value: str(message.value),
        headers: headersOut(message.headers),
        timestamp: Number(message.timestamp),
        timestampType: message.batchContext.timestampType,
      })
      if (Number(message.offset) >= ends[topic][partition] - 1) {
        pending.delete(`${topic}/${partition}`)
        if (pending.size === 0) done('complete')
      }
    },
  })
  const outcome = await finished
  clearTimeout(timer)
  await consumer.disconnect()
  return { outcome, records, pending: [...pending] }
}

const STEPS = { send, read, admin, createTopic, setOffsets, transaction, joinGroup, produce, group, fetchOffsets, groups, deleteGroups, offsetsByTime }


runSteps(STEPS)
