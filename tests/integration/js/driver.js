// The command line shared by the js/ client drivers: `node <driver>.js <bootstrap> <step> '<json args>'`.
// runSteps() runs one step, prints its result as one JSON line and exits 0; on a throw it prints
// {"error", "message", "type", "stack"} (message from `describe`) and exits 1. The built-in step
// `sequence` ('{"steps": [[step, args], ...]}') runs several steps in one process and answers the
// list of their results: loading a client costs up to a second of CPU per process.
'use strict'

const [bootstrap, step, rawArgs] = process.argv.slice(2)
const args = rawArgs ? JSON.parse(rawArgs) : {}

// exit only once stdout is flushed: a pipe takes large writes asynchronously, and process.exit()
// would cut the JSON short
const finish = (text, code) => process.stdout.write(text + '\n', () => process.exit(code))

function runSteps(steps, describe = e => e.message) {
  steps = {
    ...steps,
    sequence: async ({ steps: list }) => {
      const results = []
      for (const [name, stepArgs] of list) {
        if (!steps[name]) throw new Error(`unknown step ${name}`)
        results.push(await steps[name](stepArgs))
      }
      return results
    },
  }
  const fn = steps[step]
  const main = async () => {
    if (!fn) throw new Error(`unknown step ${step}; one of ${Object.keys(steps).join(', ')}`)
    return JSON.stringify(await fn(args))
  }
  main().then(
    out => finish(out, 0),
    e => finish(JSON.stringify({ error: e.name, message: describe(e), type: e.type || null, stack: e.stack }), 1)
  )
}

module.exports = { bootstrap, runSteps }
