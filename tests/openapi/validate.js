#!/usr/bin/env node
// node validate.js DOC.json [SAMPLES.json]
//
// 1. Validates DOC.json as an OpenAPI 3.1 document with
//    @apidevtools/swagger-parser (the official 3.1 schema, then the spec's
//    rules: unique operationIds, path parameters declared, $refs resolve).
// 2. Compiles every schema of components/schemas with Ajv's JSON Schema
//    2020-12 validator in strict mode (what 3.1 schema objects are).
// 3. With SAMPLES.json ({"SchemaName": [value, ...], ...}), prints for each
//    value whether the schema accepts it: {"SchemaName": [true, false, ...]},
//    so the caller can compare the document's verdict with the server's.
// Exit 0 and "valid" on stdout when all is well, 1 with the errors otherwise.
'use strict';
const fs = require('fs');
const SwaggerParser = require('@apidevtools/swagger-parser');
const Ajv2020 = require('ajv/dist/2020').default;

async function main() {
  const [file, samplesFile] = process.argv.slice(2);
  const doc = JSON.parse(fs.readFileSync(file, 'utf8'));
  if (doc.openapi !== '3.1.0') throw new Error('not an OpenAPI 3.1.0 document: ' + doc.openapi);
  // validate() dereferences in place: give it a copy
  await SwaggerParser.validate(JSON.parse(JSON.stringify(doc)));
  const ajv = new Ajv2020({ strict: true, allErrors: true });
  for (const f of ['int32', 'int64', 'float', 'double']) ajv.addFormat(f, true);
  const schemas = (doc.components && doc.components.schemas) || {};
  for (const [name, s] of Object.entries(schemas)) ajv.addSchema(s, '#/components/schemas/' + name);
  const out = {};
  for (const name of Object.keys(schemas)) {
    const v = ajv.getSchema('#/components/schemas/' + name);
    if (!v) throw new Error('schema ' + name + ' does not compile');
  }
  if (samplesFile) {
    const samples = JSON.parse(fs.readFileSync(samplesFile, 'utf8'));
    for (const [name, values] of Object.entries(samples)) {
      const v = ajv.getSchema('#/components/schemas/' + name);
      if (!v) throw new Error('no schema ' + name);
      out[name] = values.map((x) => v(x));
    }
    console.log(JSON.stringify(out));
  }
  console.log('valid');
}

main().catch((e) => {
  console.error(String(e && e.stack ? e.stack : e));
  if (e && e.details) console.error(JSON.stringify(e.details, null, 2));
  process.exit(1);
});
