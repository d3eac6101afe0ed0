// Expands each rule read from stdin (a JSON array of {dtstart, rule, max})
// with the npm rrule package and prints, for each, its occurrences'
// wall clocks (floating times: no zone, as the Go side's nominal times).
import rrule from "rrule";

const { RRule } = rrule;

let input = "";
for await (const chunk of process.stdin) input += chunk;
const out = JSON.parse(input).map(({ dtstart, rule, max }) => {
  const r = RRule.fromString(`DTSTART:${dtstart}\nRRULE:${rule}`);
  return r.all((_, i) => i < max).map((d) => d.toISOString().slice(0, 19));
});
process.stdout.write(JSON.stringify(out));
