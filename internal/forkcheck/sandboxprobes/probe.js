// The Node side of `zygo check sandboxes`, run inside the sandbox by /usr/bin/node.
//
//   probe.js live DIR          the long-lived probe: draws once from every generator (so
//                              the UUID cache and OpenSSL's state are live), writes
//                              DIR/node.ready, waits for DIR/go, then draws again into
//                              DIR/node.json
//   probe.js service DIR NAME  the same as a declared service (on_fork = restart): NAME.json
//   probe.js fresh             a process started after the copy: one JSON line of draws
"use strict";
const crypto = require("crypto");
const fs = require("fs");
const path = require("path");

function draws() {
  return {
    "Math.random()": Math.random(),
    "crypto.randomUUID()": crypto.randomUUID(),
    "crypto.randomUUID({disableEntropyCache: true})": crypto.randomUUID({ disableEntropyCache: true }),
    "crypto.randomBytes(16)": crypto.randomBytes(16).toString("hex"),
  };
}

function publish(file, obj) {
  fs.writeFileSync(file + ".tmp", JSON.stringify(obj));
  fs.renameSync(file + ".tmp", file);
}

function waitThenReport(dir, name) {
  draws();
  publish(path.join(dir, name + ".ready"), { pid: process.pid });
  const t = setInterval(() => {
    if (!fs.existsSync(path.join(dir, "go"))) return;
    clearInterval(t);
    const rows = draws();
    rows.pid = process.pid;
    publish(path.join(dir, name + ".json"), { rows });
  }, 20);
}

const [mode, dir, name] = process.argv.slice(2);
if (mode === "live") {
  waitThenReport(dir, "node");
} else if (mode === "service") {
  waitThenReport(dir, name);
} else if (mode === "fresh") {
  const rows = draws();
  rows.pid = process.pid;
  process.stdout.write(JSON.stringify(rows));
} else {
  console.error("unknown mode " + mode);
  process.exit(2);
}
