// The asl-validator half of the state machine definition gate (devtools/asl_gate.py): reads a JSON
// array of definitions on stdin and writes, as JSON on stdout, each one's asl-validator errors (an
// empty list when it is valid), so one node process checks every state machine of a run.
"use strict";

const validate = require("asl-validator");

const chunks = [];
process.stdin.on("data", (chunk) => chunks.push(chunk));
process.stdin.on("end", () => {
  const definitions = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  // Both checks on, as the package's own CLI runs them: JSONPath syntax and the shape of Task ARNs.
  const errors = definitions.map((definition) => validate(definition, { checkPaths: true, checkArn: true }).errors);
  process.stdout.write(JSON.stringify(errors));
});
