/**
 * Golden fixtures: each payload under test/fixtures/otlp is an export as its client sends it
 * (OTLP/JSON; values as strings and as numbers, as those clients write them); the file of the
 * same name under expected/ is the usage records the genai connector makes of it (REST field
 * names, as the validate → attribution → pricing pipeline receives them) and the items it
 * rejects. Each payload also goes through the protobuf decoder: both encodings give the same
 * records, transactionIds included (a retry over the other transport is the same record), and
 * so does decoding only the spans the connector reads (what the otlp receiver does).
 */
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { genaiHarness } from '../helpers/genai.js'
import { FIXTURES, fixture } from '../helpers/otlp.js'

const names = readdirSync(FIXTURES).filter((f) => f.endsWith('.json'))

t.test('every fixture maps to its expected records, from OTLP/JSON and from protobuf', async (t) => {
  t.ok(names.length >= 15, 'the fixtures are there')
  const h = await genaiHarness(t)
  for (const name of names) {
    const expected = fixture(join('expected', name))
    const signal = name.startsWith('traces') ? 'traces' : 'logs'
    for (const encoding of ['json', 'protobuf'] as const) {
      const got = await h.run(signal, fixture(name), { encoding })
      t.same({ records: got.records, rejected: got.rejected }, expected, `${name} (${encoding})`)
      t.equal(got.error, undefined, `${name} (${encoding}): the batch stands`)
      if (signal !== 'traces') continue
      // As the otlp receiver decodes traces for the genai connector: only the spans it reads.
      const read = await h.run(signal, fixture(name), { encoding, readOnly: true })
      t.same({ records: read.records, rejected: read.rejected }, expected, `${name} (${encoding}, the spans the connector reads)`)
      t.equal(read.error, undefined, `${name} (${encoding}, the spans the connector reads): the batch stands`)
    }
  }
})
