-- A store as the daemon of commit 95ba1de: functions, versions, logs (and 8ee7c91: secrets) made it (PRAGMA user_version 0:
-- before numbered migrations), its DDL copied from that commit, with rows. Never edit:
-- TestMigrationsFrom opens it with today's code.
CREATE TABLE IF NOT EXISTS functions (
	name           TEXT PRIMARY KEY,
	active_version TEXT NOT NULL,
	created_at     INTEGER NOT NULL,
	updated_at     INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (
	function   TEXT NOT NULL,
	hash       TEXT NOT NULL,
	manifest   TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	PRIMARY KEY (function, hash)
);
CREATE TABLE IF NOT EXISTS logs (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	function   TEXT NOT NULL,
	version    TEXT NOT NULL,
	request_id TEXT NOT NULL,
	stream     TEXT NOT NULL,
	at         INTEGER NOT NULL,
	line       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS logs_function ON logs (function, id);
CREATE INDEX IF NOT EXISTS logs_request ON logs (request_id);
CREATE TABLE IF NOT EXISTS secrets (
		name TEXT PRIMARY KEY, nonce BLOB NOT NULL, box BLOB NOT NULL, updated_at INTEGER NOT NULL);

INSERT INTO versions VALUES ('hello', 'sha256:aa', '{"name":"hello"}', 1000);
INSERT INTO functions VALUES ('hello', 'sha256:aa', 1000, 2000);
INSERT INTO logs (function, version, request_id, stream, at, line) VALUES ('hello', 'sha256:aa', 'req-1', 'stdout', 1500, 'hello from before');
INSERT INTO secrets VALUES ('API_KEY', x'00', x'01', 1000);
