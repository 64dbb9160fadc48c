#!/usr/bin/env node
// kafkajs over TLS / SASL for tests/integration/test_security_clients.py:
//   node security_client.js '{"jobs": [{"endpoint": {...}, "topic": "t", "count": 5}, ...]}'
// Each job produces `count` values v0..v(n-1) to partition 0 of `topic` through the endpoint
// (bootstrap, tls + CA / client cert, sasl mechanism + user), reads them back with a group
// consumer from the beginning, and reports the values it read; stdout is one JSON list (per job).
// It asserts nothing: the Python test checks what came back.
'use strict'

const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

const job = async ({ endpoint: ep, topic, count }) => {
  const config = {
    clientId: 'kompakt-security-test',
    brokers: [ep.bootstrap],
    logLevel: logLevel.WARN,
    retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1000 },
    connectionTimeout: 5000,
    requestTimeout: 15000,
  }
  if (ep.tls) {
    config.ssl = { ca: [fs.readFileSync(ep.ca)], servername: 'localhost' }
    if (ep.cert) {
      config.ssl.cert = fs.readFileSync(ep.cert)
      config.ssl.key = fs.readFileSync(ep.key)
    }
  }
  if (ep.mechanism) config.sasl = { mechanism: ep.mechanism, username: ep.username, password: ep.password }
  const kafka = new Kafka(config)
  const producer = kafka.producer({ allowAutoTopicCreation: true })
  await producer.connect()
  const messages = []
  for (let i = 0; i < count; i++) messages.push({ value: `v${i}`, partition: 0 })
  await producer.send({ topic, messages })
  await producer.disconnect()

  const consumer = kafka.consumer({ groupId: `g-${topic}`, sessionTimeout: 10000, heartbeatInterval: 500 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const got = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${got.length} of ${count}`)), 30000)
    consumer.run({
      eachMessage: async ({ message }) => {
        got.push(message.value.toString())
        if (got.length >= count) { clearTimeout(timer); resolve() }
      },
    }).catch(reject)
  })
  await consumer.disconnect()
  return got
}

const main = async () => {
  const { jobs } = JSON.parse(process.argv[2])
  const out = []
  for (const j of jobs) out.push(await job(j))
  return out
}

main().then(
  out => process.stdout.write(JSON.stringify(out) + '\n', () => process.exit(0)),
  e => process.stdout.write(JSON.stringify({ error: e.name, message: e.message, stack: e.stack }) + '\n',
    () => process.exit(1))
)
