-- A store as the daemon of commit 7f1d5b9: + sandboxes, checkpoints made it (PRAGMA user_version 0:
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
CREATE TABLE IF NOT EXISTS sandboxes (
	id            TEXT PRIMARY KEY,
	name          TEXT NOT NULL UNIQUE,
	backend       TEXT NOT NULL,
	engine_id     TEXT NOT NULL,
	state         TEXT NOT NULL,
	parent_id     TEXT NOT NULL DEFAULT '',
	checkpoint_id TEXT NOT NULL DEFAULT '',
	generation    TEXT NOT NULL,
	token         TEXT NOT NULL,
	options       TEXT NOT NULL,
	services      TEXT NOT NULL,
	error         TEXT NOT NULL DEFAULT '',
	created_at    INTEGER NOT NULL,
	updated_at    INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoints (
	id          TEXT PRIMARY KEY,
	tag         TEXT NOT NULL DEFAULT '',
	sandbox_id  TEXT NOT NULL,
	parent_id   TEXT NOT NULL DEFAULT '',
	backend     TEXT NOT NULL,
	dir         TEXT NOT NULL,
	size_bytes  INTEGER NOT NULL,
	token       TEXT NOT NULL,
	generation  TEXT NOT NULL,
	hostname    TEXT NOT NULL,
	options     TEXT NOT NULL,
	created_at  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS checkpoints_parent ON checkpoints (parent_id);

INSERT INTO versions VALUES ('hello', 'sha256:aa', '{"name":"hello"}', 1000);
INSERT INTO functions VALUES ('hello', 'sha256:aa', 1000, 2000);
INSERT INTO logs (function, version, request_id, stream, at, line) VALUES ('hello', 'sha256:aa', 'req-1', 'stdout', 1500, 'hello from before');
INSERT INTO secrets VALUES ('API_KEY', x'00', x'01', 1000);
INSERT INTO sandboxes VALUES ('sb-1', 'one', 'gvisor', 'sb-1-aaaaaa', 'running', '', '', 'gen-1', 'sb-token', '{}', '[]', '', 1, 2);
INSERT INTO checkpoints (id, tag, sandbox_id, parent_id, backend, dir, size_bytes, token, generation, hostname, options, created_at)
	VALUES ('cp-old', 'base', 'sb-1', '', 'gvisor', '/images/cp-old', 42, 'cp-token', 'gen-1', 'h', '{}', 3);
