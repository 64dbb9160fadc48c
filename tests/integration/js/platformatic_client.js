#!/usr/bin/env node
// @platformatic/kafka driver for tests/integration/test_compat_platformatic.py: one step per run.
//
//   node platformatic_client.js <bootstrap> <step> '<json args>'
//
// @platformatic/kafka is a modern pure-JavaScript client written against Kafka 3.5-4.1 (Produce
// v11, Fetch v17, Metadata v12, CreateTopics v7, ListOffsets v9, JoinGroup v9, flexible versions
// everywhere), the opposite end of the version range from kafkajs. Prints one JSON document (what
// the step saw; bigints as strings, Maps as objects) and exits 0, or {"error", "message"} and 1.
// It asserts nothing itself: the checks live in the Python test.
'use strict'

const { Admin, Consumer, Producer, stringSerializers, stringDeserializers } = require('@platformatic/kafka')

const { bootstrap, runSteps } = require('./driver')
const base = {
  clientId: 'kompakt-platformatic-test',
  bootstrapBrokers: [bootstrap],
  retries: 3,
  retryDelay: 100,
  timeout: 15000,
}

// JSON with bigints as strings and Maps as plain objects (or entry lists when keys repeat)
const plain = v =>
  JSON.parse(
    JSON.stringify(v, (_k, x) =>
      typeof x === 'bigint' ? x.toString() : x instanceof Map ? Object.fromEntries(x) : x instanceof Set ? [...x] : x
    )
  )
const str = b => (b === undefined || b === null ? null : Buffer.isBuffer(b) ? b.toString('utf8') : String(b))

async function withAdmin(fn) {
  const admin = new Admin(base)
  try {
    return await fn(admin)
  } finally {
    await admin.close()
  }
}

// CreateTopics v7 (with configs), Metadata, DescribeConfigs v4, IncrementalAlterConfigs v1,
// CreatePartitions v3, DeleteTopics v6, DescribeCluster via metadata, ListTopics.
async function admin({ topic, doomed }) {
  return withAdmin(async admin => {
    const r = {}
    r.created = plain(
      await admin.createTopics({
        topics: [topic],
        partitions: 3,
        replicas: 1,
        configs: [{ name: 'cleanup.policy', value: 'compact' }, { name: 'min.cleanable.dirty.ratio', value: '0.1' }],
      })
    )
    await admin.createTopics({ topics: [doomed], partitions: 1, replicas: 1 })
    try {
      await admin.createTopics({ topics: [topic], partitions: 3, replicas: 1 })
      r.createAgain = 'ok'
    } catch (e) {
      r.createAgain = errorText(e)
    }
    r.listed = (await admin.listTopics()).sort()
    const meta = await admin.metadata({ topics: [topic, doomed] })
    r.metadata = plain(meta)
    const configs = await admin.describeConfigs({
      resources: [{ resourceType: 2, resourceName: topic, configurationKeys: ['cleanup.policy', 'retention.ms', 'min.cleanable.dirty.ratio'] }],
    })
    r.configs = Object.fromEntries(configs[0].configs.map(c => [c.name, { value: c.value, isDefault: c.isDefault, source: c.configSource }]))
    await admin.incrementalAlterConfigs({
      resources: [{ resourceType: 2, resourceName: topic, configs: [{ name: 'retention.ms', configOperation: 0, value: '3600000' }] }],
    })
    const after = await admin.describeConfigs({
      resources: [{ resourceType: 2, resourceName: topic, configurationKeys: ['cleanup.policy', 'retention.ms'] }],
    })
    r.altered = Object.fromEntries(after[0].configs.map(c => [c.name, c.value]))
    await admin.createPartitions({ topics: [{ name: doomed, count: 2 }] })
    r.doomedPartitions = (await admin.metadata({ topics: [doomed], forceUpdate: true })).topics.get(doomed).partitionsCount
    await admin.deleteTopics({ topics: [doomed] })
    r.listedAfterDelete = (await admin.listTopics()).sort()
    return r
  })
}

function errorText(e) {
  const parts = [e.name, e.message]
  for (const inner of e.errors || []) parts.push(errorText(inner))
  if (e.cause) parts.push(errorText(e.cause))
  if (e.apiId) parts.push(e.apiId)
  return parts.join(' | ')
}

// `jobs`: [{topic, compression, batches}], each batch a list of {partition, key, value,
// headers: [[k, v]], timestamp} sent by one send(). One producer (one process start) for all jobs:
// loading the client costs about a second of CPU.
async function send({ jobs, idempotent = false, autocreate = false }) {
  const producer = new Producer({ ...base, serializers: stringSerializers, idempotent, acks: -1, autocreateTopics: autocreate })
  const offsets = []
  try {
    for (const { topic, compression = 'none', batches } of jobs) {
      for (const batch of batches) {
        const messages = batch.map(r => {
          const m = { topic, partition: r.partition, key: r.key ?? undefined, value: r.value ?? undefined }
          if (r.headers && r.headers.length) m.headers = new Map(r.headers.map(([k, v]) => [k, v ?? undefined]))
          if (r.timestamp !== null && r.timestamp !== undefined) m.timestamp = BigInt(r.timestamp)
          return m
        })
        // acks per send: the constructor's `acks` does not reach send(), which defaults to 1
        // (LEADER) unless idempotent, and acks=1 answers before the high watermark (the synced
        // offset) reaches the records
        const result = await producer.send({ messages, compression, acks: -1 })
        offsets.push(...plain(result.offsets || []))
      }
    }
  } finally {
    await producer.close()
  }
  return { offsets }
}

// A group of `members` consumers from the earliest offset until `expect` messages arrived in
// total, committing each message, then close (LeaveGroup).
async function group({ topics, groupId, members = 1, expect, timeoutMs = 30000 }) {
  const consumers = []
  const streams = []
  const seen = []
  const joins = []
  let done
  const finished = new Promise(resolve => (done = resolve))
  const timer = setTimeout(() => done('timeout'), timeoutMs)
  if (expect === 0) done('complete')
  for (let n = 0; n < members; n++) {
    const consumer = new Consumer({
      ...base,
      groupId,
      deserializers: stringDeserializers,
      sessionTimeout: 10000,
      heartbeatInterval: 500,
      maxWaitTime: 100,
    })
    consumer.on('consumer:group:join', p =>
      joins.push({ member: n, generationId: p.generationId, assignments: plain(p.assignments || []) })
    )
    consumers.push(consumer)
  }
  await Promise.all(
    consumers.map(async (consumer, n) => {
      const stream = await consumer.consume({ topics, mode: 'committed', fallbackMode: 'earliest', autocommit: false })
      streams.push(stream)
      stream.on('error', e => done(`stream error: ${errorText(e)}`))
      stream.on('data', async message => {
        seen.push({
          member: n,
          topic: message.topic,
          partition: message.partition,
          offset: Number(message.offset),
          key: str(message.key),
          value: str(message.value),
          headers: [...message.headers].map(([k, v]) => [str(k), str(v)]),
          timestamp: Number(message.timestamp),
        })
        try {
          await message.commit()
        } catch (e) {
          done(`commit failed: ${errorText(e)}`)
        }
        if (seen.length >= expect) done('complete')
      })
    })
  )
  const outcome = await finished
  clearTimeout(timer)
  await Promise.all(streams.map(s => s.close()))
  await Promise.all(consumers.map(c => c.close()))
  return { outcome, seen, joins }
}

async function offsets({ groupId, topic, partitions }) {
  return withAdmin(async admin => {
    const committed = await admin.listConsumerGroupOffsets({ groups: [groupId] })
    const ends = await admin.listOffsets({
      topics: [{ name: topic, partitions: [...Array(partitions).keys()].map(p => ({ partitionIndex: p, timestamp: -1n })) }],
    })
    return { committed: plain(committed), ends: plain(ends) }
  })
}

// ListGroups, DescribeGroups of `groupIds`, then DeleteGroups of `remove` (a list) if given; a
// group that cannot be deleted makes the client throw (e.g. GROUP_ID_NOT_FOUND).
async function groups({ groupIds, remove = [] }) {
  return withAdmin(async admin => {
    const r = {}
    r.listed = plain(await admin.listGroups())
    r.described = plain(await admin.describeGroups({ groups: groupIds }))
    if (remove.length) {
      await admin.deleteGroups({ groups: remove })
      r.listedAfterDelete = plain(await admin.listGroups())
    }
    return r
  })
}

// ListOffsets by timestamp (and earliest/latest), then DeleteRecords v2
async function times({ topic, timestamp, deleteBelow }) {
  return withAdmin(async admin => {
    const list = ts => admin.listOffsets({ topics: [{ name: topic, partitions: [{ partitionIndex: 0, timestamp: BigInt(ts) }] }] })
    const r = {}
    r.byTimestamp = plain(await list(timestamp))
    r.earliest = plain(await list(-2))
    r.maxTimestamp = plain(await list(-3))
    r.deleted = plain(await admin.deleteRecords({ topics: [{ name: topic, partitions: [{ partition: 0, offset: BigInt(deleteBelow) }] }] }))
    r.earliestAfter = plain(await list(-2))
    return r
  })
}

// Read `ends` ({topic: {partition: endOffset}}) completely from the earliest offsets through a
// fresh group (no commits): every record with offset, key, value, headers and timestamp.
async function read({ ends, groupId, timeoutMs = 30000 }) {
  const pending = new Set()
  for (const [t, parts] of Object.entries(ends)) {
    for (const [p, end] of Object.entries(parts)) if (end > 0) pending.add(`${t}/${p}`)
  }
  const consumer = new Consumer({ ...base, groupId, deserializers: stringDeserializers, maxWaitTime: 50,
                                  sessionTimeout: 10000, heartbeatInterval: 500 })
  const records = []
  let done
  const finished = new Promise(resolve => (done = resolve))
  const timer = setTimeout(() => done('timeout'), timeoutMs)
  if (pending.size === 0) done('complete')
  const stream = await consumer.consume({ topics: Object.keys(ends), mode: 'earliest', autocommit: false })
  stream.on('error', e => done(`stream error: ${errorText(e)}`))
  stream.on('data', message => {
    const offset = Number(message.offset)
    records.push({
      topic: message.topic,
      partition: message.partition,
      offset,
      key: str(message.key),
      value: str(message.value),
      headers: [...message.headers].map(([k, v]) => [str(k), str(v)]),
      timestamp: Number(message.timestamp),
    })
    if (offset >= ends[message.topic][message.partition] - 1) {
      pending.delete(`${message.topic}/${message.partition}`)
      if (pending.size === 0) done('complete')
    }
  })
  const outcome = await finished
  clearTimeout(timer)
  await stream.close()
  await consumer.close()
  return { outcome, records, pending: [...pending] }
}

// AlterClientQuotas v1 then DescribeClientQuotas v0 (test_client_quotas): sets `quotas`
// ({client id: {key: value}}), removes `remove` ({client id: [keys]}), describes every client-id entity.
async function quotas({ set = {}, remove = {} }) {
  return withAdmin(async admin => {
    const entries = []
    for (const [clientId, values] of Object.entries(set)) {
      entries.push({
        entities: [{ entityType: 'client-id', entityName: clientId }],
        ops: Object.entries(values).map(([key, value]) => ({ key, value, remove: false })),
      })
    }
    for (const [clientId, keys] of Object.entries(remove)) {
      entries.push({
        entities: [{ entityType: 'client-id', entityName: clientId }],
        ops: keys.map(key => ({ key, remove: true })),
      })
    }
    const altered = entries.length ? plain(await admin.alterClientQuotas({ entries })) : []
    const described = plain(await admin.describeClientQuotas({ components: [{ entityType: 'client-id', matchType: 2 }] }))
    return { altered, described }
  })
}

const STEPS = { admin, send, read, group, offsets, groups, times, quotas }


runSteps(STEPS, errorText)
