// How the dashboard writes numbers, money and times. Money arrives as exact decimal strings and
// is shown as sent (only trimmed for the eye where said); charts use its number value.

const group = new Intl.NumberFormat('en-US')

/** `$0.0123` from "0.0123", exact; `digits` rounds for display (tables keep the exact text). */
export function usd(s, digits) {
  if (s === null || s === undefined) return '–'
  if (digits === undefined) return (s.startsWith('-') ? '-$' + s.slice(1) : '$' + s)
  return '$' + Number(s).toFixed(digits)
}

/** A chart axis value in USD, short. */
export function usdTick(v) {
  if (v === 0) return '$0'
  const a = Math.abs(v)
  if (a >= 1000) return '$' + group.format(Math.round(v))
  if (a >= 1) return '$' + v.toFixed(2)
  return '$' + Number(v.toPrecision(3)).toString()
}

export const int = (n) => (n === null || n === undefined ? '–' : group.format(n))
export const pct = (f) => (f === null || f === undefined ? '–' : `${(f * 100).toFixed(f > 0 && f < 0.001 ? 3 : 1)} %`)

export function ms(v) {
  if (v === null || v === undefined) return '–'
  if (v < 1000) return `${Math.round(v)} ms`
  if (v < 60_000) return `${(v / 1000).toFixed(v < 10_000 ? 2 : 1)} s`
  return `${(v / 60_000).toFixed(1)} min`
}

/** `2026-11-20 10:02:00` (UTC) from an ISO string. */
export function utc(iso) {
  if (!iso) return '–'
  return iso.slice(0, 19).replace('T', ' ')
}

/** A `<tr>` of cells; a cell is text, or [text, className]. */
export function row(cells) {
  const tr = document.createElement('tr')
  for (const c of cells) {
    const td = document.createElement('td')
    if (Array.isArray(c)) {
      td.textContent = c[0]
      if (c[1]) td.className = c[1]
    } else if (c instanceof Node) td.append(c)
    else td.textContent = c
    tr.append(td)
  }
  return tr
}
