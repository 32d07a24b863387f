#!/usr/bin/env node
// What xunit-viewer makes of JUnit files, as JSON on stdout, through its own code.
//
// xunit-viewer (npm, pinned in package.json/package-lock.json) renders an HTML page or a console
// table; both are drawn from the object its CLI builds with src/cli/get-suites.js (which parses
// every file with src/cli/parse.js and merges the results) and summarises with
// src/cli/get-description.js. This script calls exactly those modules and prints that object,
// so the report tests can assert what a person sees without scraping the page.
//
// Usage: node xunit_viewer.mjs FILE...
// Output: {"description": "...", "suites": [{"name", "tests": [{"name", "classname", "status", "messages"}]}]}
import fs from "node:fs";

import getDescription from "xunit-viewer/src/cli/get-description.js";
import getSuites from "xunit-viewer/src/cli/get-suites.js";

const quiet = { error: (text) => text, file: (text) => text };
const files = process.argv.slice(2).map((file) => ({ file, contents: fs.readFileSync(file, "utf-8") }));
const parsed = await getSuites(quiet, files);
const suites = Object.values(parsed.suites).map((suite) => ({
  name: suite.name,
  tests: Object.values(suite.tests).map((test) => ({
    name: test.name,
    classname: test.classname,
    status: test.status,
    messages: test.messages,
  })),
}));
process.stdout.write(JSON.stringify({ description: getDescription(parsed), suites }) + "\n");
