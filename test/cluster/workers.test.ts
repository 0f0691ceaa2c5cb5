/**
 * server.workers (issue 19 §1): one daemon, two worker processes on the same listeners and the
 * same data directory. Every request here goes on a connection of its own (agent: false), which
 * the cluster hands to the workers in turn, so each check below spans both processes; with two
 * independent processes instead, each would fail (double the rate limit, twins stored twice,
 * stale tool prices, analytics that see half the records, deliveries sent twice).
 */
import t from 'tap'
import { completion } from '../fixtures/wire-examples.js'
import { removeDir, spawnMeterd, tempDir, workerPids, writeConfig } from '../helpers/meterd.js'
import { event, sum, toolBody } from '../helpers/pricing.js'
import { startReceiver } from '../helpers/webhook-receiver.js'
import { Decimal } from '../../src/domain/pricing/money.js'
import { send, sleep, twoWorkers, type Answer } from '../helpers/workers.js'

const API = '/profitstream/v2/api'
const C = '/meter/v2/ai/completions'
const E = '/meter/v2/tool/events'

// Six two-worker daemons, each started one process after the other: more than the default 120 s
// when the machine is busy (a load average of 20 took 150 s).
t.setTimeout(300_000)

t.test('the rate limit is the machine\'s, not each worker\'s', async (t) => {
  const d = await twoWorkers(t, { extensions: { ratelimit: { backend: 'memory', limits: { metering: 20, analytics: 100, platform: 100 } } } })
  // Start at the beginning of a second, so the whole burst falls in one window. A machine loaded
  // far past its cores can take longer than a second over 60 requests: the burst is then sent
  // again in a later window (each window is counted afresh), at most three times.
  let answers: Answer[] = []
  for (let attempt = 0; attempt < 3; attempt++) {
    while (Date.now() % 1000 > 50) await sleep(5)
    answers = await Promise.all(Array.from({ length: 60 }, (_, i) => send(d.url, C, { body: completion({ transactionId: `rl-${attempt}-${i}` }) })))
    if (new Set(answers.map((a) => a.headers['x-ratelimit-reset'])).size === 1) break
    await sleep(1000)
  }
  t.equal(new Set(answers.map((a) => a.headers['x-ratelimit-reset'])).size, 1, 'one window')
  t.equal(answers.filter((a) => a.status === 201).length, 20, 'exactly the limit is admitted across both workers')
  t.equal(answers.filter((a) => a.status === 429).length, 40, 'the rest is refused')
  t.equal(await d.stop('SIGTERM'), 0, 'SIGTERM drains both workers and exits 0')
})

t.test('/metrics answers while the second worker is still starting', async (t) => {
  const dir = tempDir('meterd-workers-')
  t.teardown(() => removeDir(dir))
  // Ready as soon as the first worker listens; the second is forked only then.
  const d = await spawnMeterd(t, { dataDir: `${dir}/data`, env: { METERD_WORKERS: '2' }, readyTimeoutMs: 60_000 })
  const res = await send(d.url, '/metrics')
  t.equal(res.status, 200, 'the workers that are ready answer; one still starting is not waited for')
  t.match(res.body, /^meterd_up 1$/m)
  t.equal(await d.stop('SIGTERM'), 0)
})

t.test('dedup, idempotency, tools, tiers, analytics, webhooks and metrics hold across workers', async (t) => {
  const rx = await startReceiver(t)
  const d = await twoWorkers(t, {
    extensions: {
      ratelimit: { backend: 'memory', limits: { metering: 100000, analytics: 100000, platform: 100000 } },
      exportconfigs: { allow_private_destinations: ['127.0.0.1'], poll_interval_ms: 50, max_configurations_per_team: 5 },
      alerts: { max_rules_per_team: 4 },
    },
  })

  await t.test('a twin posted to both workers at once is stored once', async (t) => {
    const body = completion({ transactionId: 'twin-1' })
    const answers = await Promise.all(Array.from({ length: 16 }, () => send(d.url, C, { body })))
    t.same(new Set(answers.map((a) => a.status)), new Set([201]))
    t.equal(new Set(answers.map((a) => a.body.id)).size, 1, 'every answer names the one stored record')
    const list = await send(d.url, `${API}/sources/metrics/ai/completions?transactionId=twin-1`)
    t.equal(list.body.page.totalElements, 1, 'stored once')
  })

  await t.test('one Idempotency-Key used on both workers at once stores once', async (t) => {
    const body = completion()
    delete body.transactionId
    body.organizationName = 'IdemOrg'
    const headers = { 'idempotency-key': 'workers-idem-1' }
    const answers = await Promise.all(Array.from({ length: 16 }, () => send(d.url, C, { body, headers })))
    const ok = answers.filter((a) => a.status === 201)
    t.ok(ok.length >= 1, 'answered')
    t.ok(answers.every((a) => a.status === 201 || (a.status === 409 && a.body.error.code === 'idempotency_key_in_progress')), 'stored answers or in-progress')
    t.equal(new Set(ok.map((a) => a.body.id)).size, 1, 'every 201 names the same record')
    const again = await send(d.url, C, { body, headers })
    t.equal(again.body.id, ok[0].body.id, 'replayed afterwards')
    const list = await send(d.url, `${API}/sources/metrics/ai/completions?size=1000`)
    t.equal(list.body._embedded.aICompletionMetricResourceList.filter((r: any) => r.organizationName === 'IdemOrg').length, 1, 'one record')
  })

  await t.test('a tool created on one worker prices events on the other', async (t) => {
    // Both workers look the toolId up (and remember it is unknown) before it exists.
    const before = await Promise.all(Array.from({ length: 6 }, () => send(d.url, E, { body: event('late-tool') })))
    t.ok(before.every((a) => a.status === 201))
    const created = await send(d.url, `${API}/tools`, { body: toolBody('late-tool', { name: 'calls', aggregationType: 'COUNT', unitPrice: '0.25' }) })
    t.equal(created.status, 201, JSON.stringify(created.body))
    await sleep(20)
    const after = await Promise.all(Array.from({ length: 8 }, () => send(d.url, E, { body: event('late-tool', { organizationName: 'After' }) })))
    t.ok(after.every((a) => a.status === 201))
    const list = await send(d.url, `${API}/sources/metrics/tool/events?toolId=late-tool&size=100`)
    const priced = list.body._embedded.toolEventMetricResourceList.filter((r: any) => r.organizationName === 'After')
    t.equal(priced.length, 8)
    t.ok(priced.every((r: any) => r.cost?.total === '0.25'), 'every event after the change is priced, whichever worker took it')
  })

  await t.test('a graduated tier crossed by events on both workers costs the table\'s total', async (t) => {
    const tiers = [{ upTo: 100, unitPrice: 0.01 }, { upTo: 600, unitPrice: '0.008' }, { upTo: null, unitPrice: 0.005 }]
    t.equal((await send(d.url, `${API}/tools`, { body: toolBody('tiered', { name: 'units', aggregationType: 'SUM', tiersMode: 'graduated', tiers }) })).status, 201)
    await sleep(20)
    const units = Array.from({ length: 300 }, (_, i) => (i % 7) + 1)
    const total = units.reduce((a, b) => a + b, 0)
    const answers = await Promise.all(units.map((u) => send(d.url, E, { body: event('tiered', { organizationName: 'Tiers', usageMetadata: { units: u } }) })))
    t.ok(answers.every((a) => a.status === 201))
    // C(total) of the graduated table, computed here.
    let left = total
    let expected = new Decimal(0)
    let from = 0
    for (const tier of tiers) {
      const cap = tier.upTo === null ? Infinity : tier.upTo - from
      const n = Math.min(left, cap)
      expected = expected.plus(new Decimal(tier.unitPrice).times(n))
      left -= n
      from = tier.upTo ?? from
      if (left === 0) break
    }
    const records: any[] = []
    for (let page = 0; page < 1; page++) {
      const res = await send(d.url, `${API}/sources/metrics/tool/events?toolId=tiered&size=1000&page=${page}`)
      records.push(...res.body._embedded.toolEventMetricResourceList)
    }
    t.equal(records.length, 300)
    t.equal(sum(records.map((r) => r.cost.total)), expected.toFixed(), 'the period charge is exact')
  })

  await t.test('every worker answers analytics from every record, and webhooks go out once', async (t) => {
    const hook = await send(d.url, `${API}/export-configurations`, { body: { name: 'all', url: rx.url, filters: { organizationName: 'Hooked' } } })
    t.equal(hook.status, 201, JSON.stringify(hook.body))
    await sleep(20)
    const posted = await Promise.all(
      Array.from({ length: 40 }, (_, i) => send(d.url, C, { body: completion({ transactionId: `hooked-${i}`, organizationName: 'Hooked' }) })),
    )
    t.ok(posted.every((a) => a.status === 201))
    // Rows cross to the other worker within ~20 ms; on a machine busy with other work, later:
    // asked until both agree (a row lost on the way would keep one short for good).
    let answers: Answer[] = []
    for (let i = 0; i < 50; i++) {
      await sleep(100)
      answers = await Promise.all(Array.from({ length: 8 }, () => send(d.url, `${API}/analytics/summary?organizationName=Hooked&from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z`)))
      if (answers.every((a) => a.status === 200 && a.body.period.completions === 40)) break
    }
    t.same(new Set(answers.map((a) => a.status)), new Set([200]))
    t.same(new Set(answers.map((a) => a.body.period.completions)), new Set([40]), 'both workers count all 40 records')

    await rx.waitFor(40, 10_000)
    await sleep(500) // a second delivery of any event would arrive now
    const ids = rx.received.map((r) => r.json.id)
    t.equal(ids.length, 40, 'one delivery per event')
    t.equal(new Set(ids).size, 40, 'no event delivered twice')
  })

  await t.test('changes to one export configuration or alert rule made on both workers at once are all kept', async (t) => {
    // Each round sends two partial changes of different fields at once, on connections the
    // cluster hands to different workers: both read the resource before either commits, and a
    // write that replaced the whole row with the copy it read would undo the other's change.
    const hook = await send(d.url, `${API}/export-configurations`, { body: { name: 'raced', url: rx.url, filters: { organizationName: 'Nobody' } } })
    t.equal(hook.status, 201, JSON.stringify(hook.body))
    const rule = await send(d.url, `${API}/sources/ai/anomaly`, {
      body: { name: 'raced', alertType: 'THRESHOLD', metricType: 'TOTAL_COST', operatorType: 'GREATER_THAN', threshold: 100, periodDuration: 'DAILY' },
    })
    t.equal(rule.status, 201, JSON.stringify(rule.body))
    const hookPath = `${API}/export-configurations/${hook.body.id}`
    const rulePath = `${API}/sources/ai/anomaly/${rule.body.id}`
    await sleep(20)
    const lost: string[] = []
    for (let i = 0; i < 15; i++) {
      const answers = await Promise.all([
        send(d.url, hookPath, { method: 'PATCH', body: { name: `name-${i}` } }),
        send(d.url, hookPath, { method: 'PATCH', body: { timeoutMs: 1000 + i } }),
        send(d.url, rulePath, { method: 'PUT', body: { name: `name-${i}` } }),
        send(d.url, rulePath, { method: 'PUT', body: { description: `description-${i}` } }),
      ])
      t.same(answers.map((a) => a.status), [200, 200, 200, 200], `round ${i} answered`)
      // Read on both workers (a connection each) until both show both changes: a worker hears of
      // the other's change within milliseconds; one that never shows it lost it, or kept a stale copy.
      let seen = ''
      for (let tries = 0; tries < 50; tries++) {
        const reads = await Promise.all([send(d.url, hookPath), send(d.url, hookPath), send(d.url, rulePath), send(d.url, rulePath)])
        const wrong = reads.filter((a, k) => (k < 2 ? a.body.name !== `name-${i}` || a.body.timeoutMs !== 1000 + i : a.body.name !== `name-${i}` || a.body.description !== `description-${i}`))
        seen = JSON.stringify(wrong.map((a) => ({ name: a.body.name, timeoutMs: a.body.timeoutMs, description: a.body.description })))
        if (wrong.length === 0) break
        await sleep(20)
      }
      if (seen !== '[]') lost.push(`round ${i}: ${seen}`)
    }
    t.same(lost, [], 'no change answered 200 was undone by the other worker')
    // A change of a resource deleted meanwhile on the other worker is still a 404, never a resurrection.
    const [, patched] = await Promise.all([send(d.url, hookPath, { method: 'DELETE' }), send(d.url, hookPath, { method: 'PATCH', body: { name: 'late' } })])
    t.ok([200, 404].includes(patched.status), `a PATCH racing the DELETE: ${patched.status}`)
    t.equal((await send(d.url, hookPath)).status, 404, 'the deletion stands')
  })

  await t.test('a burst of creations on both workers stops at the per-team limits', async (t) => {
    // What a team holds, as both workers list it (a connection each): they agree within milliseconds of a change.
    const held = async (path: string, list: (b: any) => unknown[]) => {
      let counts: number[] = []
      for (let tries = 0; tries < 50; tries++) {
        counts = (await Promise.all([send(d.url, path), send(d.url, path)])).map((a) => list(a.body).length)
        if (counts[0] === counts[1]) return counts[0]
        await sleep(20)
      }
      throw new Error(`the workers list ${counts.join(' and ')}`)
    }
    const configs = `${API}/export-configurations`
    const rules = `${API}/sources/ai/anomaly`
    const configsBefore = await held(`${configs}?size=100`, (b) => b.data)
    const rulesBefore = await held(`${rules}?size=100`, (b) => b._embedded?.aIAnomalyResourceList ?? [])
    const answers = await Promise.all([
      ...Array.from({ length: 10 }, (_, i) => send(d.url, configs, { body: { name: `burst-${i}`, url: rx.url, filters: { organizationName: 'Nobody' } } })),
      ...Array.from({ length: 10 }, (_, i) =>
        send(d.url, rules, { body: { name: `burst-${i}`, alertType: 'THRESHOLD', metricType: 'TOTAL_COST', operatorType: 'GREATER_THAN', threshold: 100, periodDuration: 'DAILY' } }),
      ),
    ])
    const [c, r] = [answers.slice(0, 10), answers.slice(10)]
    t.equal(c.filter((a) => a.status === 201).length, 5 - configsBefore, 'export configurations: up to the limit of 5, whichever worker took each')
    t.ok(c.every((a) => a.status === 201 || (a.status === 422 && a.body.error.code === 'too_many_export_configurations')), 'the rest 422')
    t.equal(r.filter((a) => a.status === 201).length, 4 - rulesBefore, 'alert rules: up to the limit of 4')
    t.ok(r.every((a) => a.status === 201 || (a.status === 422 && a.body.error.code === 'too_many_rules')), 'the rest 422')
    t.equal(await held(`${configs}?size=100`, (b) => b.data), 5, 'five held')
    t.equal(await held(`${rules}?size=100`, (b) => b._embedded?.aIAnomalyResourceList ?? []), 4, 'four held')
  })

  await t.test('/metrics sums the workers', async (t) => {
    const res = await send(d.url, '/metrics')
    const m = /^meterd_ratelimit_requests_total\{bucket="metering",decision="allowed",reason="none"\} (\d+)/m.exec(res.body)
    t.ok(m, 'the counter is there')
    // twins 16 + idempotency 17 + tool events 6 + 8 + 300 + completions 40
    t.equal(Number(m![1]), 16 + 17 + 14 + 300 + 40, 'every admitted request, whichever worker took it')
    t.match(res.body, /^meterd_up 1$/m)
    // Figures of the one machine are not doubled by two workers: a 0/1 gauge stays 0 or 1.
    t.match(res.body, /^meterd_analytics_ready\{component="analytics"\} 1$/m, 'ready is 1, not one per worker')
    t.match(res.body, /^meterd_build_info\{[^}]*\} 1$/m, 'build_info is 1')
    t.match(res.body, /^meterd_store_writable 1$/m)
  })

  await t.test('a worker that dies is replaced and nothing acknowledged is lost', async (t) => {
    const [victim] = workerPids(d)
    const failures: string[] = []
    const load = Array.from({ length: 60 }, (_, i) =>
      send(d.url, C, { body: completion({ transactionId: `kill-${i}`, organizationName: 'Kill' }), timeoutMs: 10_000 }).catch((err) => void failures.push(err.message)),
    )
    process.kill(victim, 'SIGKILL')
    const answers = await Promise.all(load)
    const acked = answers.filter((a) => a?.status === 201).map((a) => a!.body.id)
    t.comment(`${acked.length} acknowledged, failed: ${JSON.stringify(failures)}`)
    t.notOk(failures.includes('timed out'), 'no request is left hanging')
    for (let i = 0; i < 600 && (workerPids(d).length < 2 || workerPids(d).includes(victim)); i++) await sleep(50)
    if (!t.equal(workerPids(d).length, 2, 'a new worker took its place')) t.comment(d.stdout.join('').slice(-3000))
    t.notOk(workerPids(d).includes(victim))
    const list = await send(d.url, `${API}/sources/metrics/ai/completions?size=1000`).catch((err) => {
      t.comment(d.stdout.join('').slice(-5000))
      throw err
    })
    const stored = new Set(list.body._embedded.aICompletionMetricResourceList.map((r: any) => r.id))
    t.ok(acked.every((id) => stored.has(id)), `all ${acked.length} acknowledged records are stored`)
    // The client retries what failed; dedup makes that safe.
    const retried = await Promise.all(Array.from({ length: 60 }, (_, i) => send(d.url, C, { body: completion({ transactionId: `kill-${i}`, organizationName: 'Kill' }) })))
    t.ok(retried.every((a) => a.status === 201))
    const after = await send(d.url, `${API}/sources/metrics/ai/completions?size=1000`)
    t.equal(after.body._embedded.aICompletionMetricResourceList.filter((r: any) => r.organizationName === 'Kill').length, 60, 'each record once')
  })

  t.equal(await d.stop('SIGTERM'), 0)
})

t.test('every worker\'s analytics answer as one process\'s on the same records', async (t) => {
  // Each worker adds its own records and the rows the other sends it (src/domain/analytics/row.ts):
  // a value lost or changed on the way makes the answers of the worker that received it differ
  // from one process's that stored every record itself.
  const limits = { ratelimit: { backend: 'memory', limits: { metering: 100000, analytics: 100000, platform: 100000 } } }
  const d = await twoWorkers(t, { extensions: limits })
  const dir = tempDir('meterd-one-')
  t.teardown(() => removeDir(dir))
  const one = await spawnMeterd(t, {
    dataDir: `${dir}/data`,
    configFiles: [new URL('../../config/meterd.yaml', import.meta.url).pathname, writeConfig(dir, { extensions: limits })],
    env: { METERD_WORKERS: '1' },
  })
  const models = [
    ['gpt-4o-mini', 'OpenAI'],
    ['gpt-4o', 'openai'],
    ['claude-3-5-sonnet-20241022', 'Anthropic'],
    ['no-such-model-anywhere', 'Nowhere'], // stored unpriced
  ]
  const bodies = Array.from({ length: 36 }, (_, i) => {
    const [model, provider] = models[i % models.length]
    const start = Date.parse('2026-11-20T08:00:00.000Z') + i * 3_700_000
    const duration = 40 + i * 13
    const input = 10 + i * 3
    const output = 1 + i * 2
    return completion({
      transactionId: `rows-${i}`,
      organizationName: 'Rows',
      productName: i % 2 ? 'Gold' : 'Silver',
      agent: i % 5 === 4 ? undefined : `agent-${i % 3}`,
      traceId: `trace-${i % 6}`,
      subscriber: { id: `u-${i % 4}`, credential: { name: `cred-${i % 2}`, value: 'v' } },
      model,
      provider,
      stopReason: i % 7 === 3 ? 'ERROR' : 'END',
      inputTokenCount: input,
      outputTokenCount: output,
      reasoningTokenCount: i % 5,
      cacheReadTokenCount: i % 4,
      cacheCreationTokenCount: i % 3,
      totalTokenCount: input + output,
      requestTime: new Date(start).toISOString(),
      responseTime: new Date(start + duration).toISOString(),
      completionStartTime: new Date(start + 7 + i).toISOString(),
      requestDuration: duration,
      timeToFirstToken: i % 3 === 0 ? 0 : 5 + i, // 0: from completionStartTime − requestTime
    })
  })
  for (const m of [d, one]) {
    const posted = await Promise.all(bodies.map((body) => send(m.url, C, { body })))
    t.same(new Set(posted.map((a) => a.status)), new Set([201]), JSON.stringify(posted.find((a) => a.status !== 201)?.body))
  }
  await sleep(100)
  const range = 'organizationName=Rows&from=2026-11-01T00:00:00Z&to=2026-12-01T00:00:00Z'
  const paths = [`summary?${range}`, `agents/cost?${range}`, `traces?${range}`, `traces/cost-distribution?${range}`, `tools/cost-over-time?${range}&interval=day`, `traces/trace-1?${range}`]
  for (const path of paths) {
    // A trace's records carry their ids, which differ between the two daemons.
    const withoutIds = (body: any) => (body.records ? { ...body, records: body.records.map(({ id: _, ...r }: any) => r) } : body)
    const expected = await send(one.url, `${API}/analytics/${path}`)
    t.equal(expected.status, 200, path)
    // Each request on a connection of its own: the cluster hands them to both workers.
    const answers = await Promise.all(Array.from({ length: 6 }, () => send(d.url, `${API}/analytics/${path}`)))
    for (const a of answers) t.same(withoutIds(a.body), withoutIds(expected.body), `${path}: the answer of one process`)
  }
})

t.test('a sidecar (upstream exporter) runs as one process; asking for more is a config error', async (t) => {
  const { spawnSync } = await import('node:child_process')
  const dir = tempDir('meterd-workers-sidecar-')
  t.teardown(() => removeDir(dir))
  const cfg = writeConfig(dir, {
    server: { workers: 2 },
    exporters: { upstream: { endpoint: 'http://127.0.0.1:9', api_key: 'hak_x_0123456789abcdef0123456789abcdef' } },
    service: { pipelines: { usage: { receivers: ['metering', 'genai'], processors: ['validate', 'attribution', 'pricing'], exporters: ['upstream'] } } },
  })
  const bin = new URL('../../bin/meterd.js', import.meta.url).pathname
  const run = spawnSync(process.execPath, [bin, 'run', '--config', new URL('../../config/meterd.yaml', import.meta.url).pathname, '--config', cfg], {
    encoding: 'utf8',
    timeout: 60_000, // a guard against a hang: loading the daemon is 2 s of CPU, over 20 s on a loaded machine
    env: { ...process.env, METERD_DATA_DIR: `${dir}/data`, METERD_ENDPOINT: '127.0.0.1:0' },
  })
  t.equal(run.status, 78, run.stderr)
  t.match(run.stderr, /server\.workers: 2 cannot run exporter upstream/)
})

t.test('a worker killed and replaced: every worker, the new one included, counts every record once', async (t) => {
  // The replacement reads the store at start and joins the running worker's socket (src/core/cluster/peers.ts):
  // from then on each hears of the records the other stores. A missed join shows as a worker counting fewer.
  // The kill comes right after the 201s: the survivor counts every record the killed worker acknowledged
  // only because a record's row goes to the other workers before its 201 (with rows sent on a timer after
  // the answer, as before 2026-11-27, the survivor missed the last ones).
  const d = await twoWorkers(t, { extensions: { ratelimit: { backend: 'memory', limits: { metering: 100000, analytics: 100000, platform: 100000 } } } })
  const summary = `${API}/analytics/summary?organizationName=Restart&from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z`
  const post = (from: number, n: number) =>
    Promise.all(Array.from({ length: n }, (_, i) => send(d.url, C, { body: completion({ transactionId: `restart-${from + i}`, organizationName: 'Restart' }) })))
  /** Counts as 8 queries on connections of their own see them (both workers answer some). */
  const counts = async () => {
    const answers = await Promise.all(Array.from({ length: 8 }, () => send(d.url, summary)))
    return answers.map((a) => (a.status === 200 ? a.body.period.completions : a.status))
  }
  t.ok((await post(0, 30)).every((a) => a.status === 201))
  const [victim] = workerPids(d)
  process.kill(victim, 'SIGKILL')
  const replaced = () => workerPids(d).length === 2 && !workerPids(d).includes(victim)
  for (let i = 0; i < 600 && !replaced(); i++) await sleep(50)
  t.ok(replaced(), 'a new worker replaces the one killed')
  // The replacement answers 503 until it has read the store, then counts what was stored before.
  let seen: unknown[] = []
  for (let i = 0; i < 100; i++) {
    seen = await counts()
    if (seen.every((c) => c === 30)) break
    await sleep(100)
  }
  t.same(new Set(seen), new Set([30]), 'both workers count the 30 records stored before the restart')

  const after = await post(30, 40)
  t.ok(after.every((a) => a.status === 201))
  // Rows cross within ~20 ms; asked until both agree (as above), for a machine busy with other work.
  for (let i = 0; i < 50; i++) {
    await sleep(100)
    seen = await counts()
    if (seen.every((c) => c === 70)) break
  }
  t.same(new Set(seen), new Set([70]), 'and each counts the 40 stored since, whichever worker stored them')
})
