//go:build pg

package main

// PostgreSQL through lib/pq (golang-github-lib-pq-dev), two ways people lock with it:
//
//   - pg_table: the lock table with an expiry of docs/choosing-a-lock.md (key, holder,
//     expire_at). Lock is one statement, so the read and the take are one transaction: insert
//     the name, or take it over if its expiry has passed; no row changed means it is held, and
//     the worker tries again after a random --retry-min..--retry-max wait (redsync's policy;
//     a lock table has no standard one). Unlock deletes the row only if this holder still has
//     it. Every take and release is a commit (synchronous_commit on: an fsync each).
//   - pg_advisory: pg_advisory_lock(hashtext(name)) on the worker's own backend, released by
//     pg_advisory_unlock or when the connection ends. It blocks in the server, queued; nothing
//     is written.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"

	_ "github.com/lib/pq"
)

const pgTable = "coetcd_bench_locks"

// The counter of the paused-holder check (stale.go).
const pgCounter = "coetcd_bench_counter"

type pgLock struct {
	cfg      config
	db       *sql.DB
	conn     *sql.Conn
	name     string
	holder   string
	advisory bool
}

func init() {
	peerSystems["pg_table"] = peerSystem{connect: connectPG(false), setup: pgSetup, leftover: pgLeftover(false)}
	peerSystems["pg_advisory"] = peerSystem{connect: connectPG(true), leftover: pgLeftover(true)}
}

func pgSetup(cfg config) error {
	db, err := sql.Open("postgres", cfg.addr)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Exec(`CREATE TABLE IF NOT EXISTS ` + pgTable +
		` (key text PRIMARY KEY, holder text NOT NULL, expire_at timestamptz NOT NULL)`)
	return err
}

func connectPG(advisory bool) func(cfg config, name string) (peerLocker, error) {
	return func(cfg config, name string) (peerLocker, error) {
		db, err := sql.Open("postgres", cfg.addr)
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := db.Conn(ctx) // one backend for the worker's whole run
		if err != nil {
			db.Close()
			return nil, err
		}
		holder := fmt.Sprintf("%d-%p", os.Getpid(), conn)
		return &pgLock{cfg: cfg, db: db, conn: conn, name: name, holder: holder, advisory: advisory}, nil
	}
}

func (l *pgLock) lock(done func() bool) error {
	ctx := context.Background()
	if l.advisory {
		_, err := l.conn.ExecContext(ctx, `SELECT pg_advisory_lock(hashtext($1))`, l.name)
		return err
	}
	for first := true; ; first = false {
		if !first {
			time.Sleep(retryDelay(l.cfg))
			if done() {
				return errStopped
			}
		}
		res, err := l.conn.ExecContext(ctx, `INSERT INTO `+pgTable+` AS t (key, holder, expire_at)
			VALUES ($1, $2, now() + $3 * interval '1 millisecond')
			ON CONFLICT (key) DO UPDATE SET holder = EXCLUDED.holder, expire_at = EXCLUDED.expire_at
			WHERE t.expire_at < now()`, l.name, l.holder, l.cfg.expiry.Milliseconds())
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			return nil
		}
	}
}

func (l *pgLock) unlock() error {
	ctx := context.Background()
	if l.advisory {
		var released bool
		if err := l.conn.QueryRowContext(ctx, `SELECT pg_advisory_unlock(hashtext($1))`, l.name).Scan(&released); err != nil {
			return err
		}
		if !released {
			return errors.New("pg_advisory_unlock: not held")
		}
		return nil
	}
	res, err := l.conn.ExecContext(ctx, `DELETE FROM `+pgTable+` WHERE key = $1 AND holder = $2`, l.name, l.holder)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return errors.New("the lock had expired (its row was gone or another's)")
	}
	return nil
}

func (l *pgLock) close() { // database/sql: a second Close returns an error, harmlessly
	l.conn.Close()
	l.db.Close()
}

func pgLeftover(advisory bool) func(cfg config) int64 {
	return func(cfg config) int64 {
		db, err := sql.Open("postgres", cfg.addr)
		if err != nil {
			return -1
		}
		defer db.Close()
		var n int64
		q := `SELECT count(*) FROM ` + pgTable + ` WHERE key LIKE $1 || '%'`
		arg := cfg.prefix
		if advisory {
			// Closed backends may take a moment to go; their locks go with them.
			q, arg = `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid <> pg_backend_pid() AND $1 <> ''`, "x"
			time.Sleep(200 * time.Millisecond)
		}
		if err := db.QueryRow(q, arg).Scan(&n); err != nil {
			return -1
		}
		return n
	}
}

func (l *pgLock) resetCounter() error {
	ctx := context.Background()
	if _, err := l.conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+pgCounter+` (name text PRIMARY KEY, v bigint NOT NULL)`); err != nil {
		return err
	}
	_, err := l.conn.ExecContext(ctx, `INSERT INTO `+pgCounter+` (name, v) VALUES ($1, 0)
		ON CONFLICT (name) DO UPDATE SET v = 0`, counterName(l.cfg))
	return err
}

func (l *pgLock) readCounter() (int64, error) {
	var v int64
	err := l.conn.QueryRowContext(context.Background(), `SELECT v FROM `+pgCounter+` WHERE name = $1`, counterName(l.cfg)).Scan(&v)
	return v, err
}

// writeCounter: fenced, the lock table's UPDATE matches only while this holder's row is there
// and unexpired. An advisory lock needs no fence: it lasts as long as the backend the write
// goes over.
func (l *pgLock) writeCounter(v int64, fenced bool) (bool, error) {
	ctx := context.Background()
	q, args := `UPDATE `+pgCounter+` SET v = $2 WHERE name = $1`, []interface{}{counterName(l.cfg), v}
	if fenced && !l.advisory {
		q += ` AND EXISTS (SELECT 1 FROM ` + pgTable + ` WHERE key = $3 AND holder = $4 AND expire_at > now())`
		args = append(args, l.name, l.holder)
	}
	res, err := l.conn.ExecContext(ctx, q, args...)
	if err != nil {
		return false, err
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}
