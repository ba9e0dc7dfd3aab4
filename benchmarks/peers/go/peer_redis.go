//go:build redis

package main

// Redis: the lock redsync (v4) takes on one node, written out on redigo
// (golang-github-gomodule-redigo-dev): Lock sets the name to a fresh random value with
// SET NX PX <expiry>, trying up to --tries times with a random --retry-min..--retry-max wait
// between tries (after each failed try it also runs its release script, as redsync does), and
// gives up after that; Unlock deletes the name only if it still holds this
// value (a script, so the compare and the delete are one step). Defaults are redsync's: expiry
// 8 s, 32 tries, 50-250 ms. Redlock (a majority of N independent nodes) is the same steps on
// each node; one node is what most deployments run.

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"time"

	"github.com/gomodule/redigo/redis"
)

const redisUnlockSource = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`

var redisUnlock = redis.NewScript(1, redisUnlockSource)

// The fenced write of the paused-holder check (stale.go): the counter is set only while the
// lock's key still has this holder's value, in one step.
const redisFencedSetSource = `if redis.call("GET", KEYS[1]) == ARGV[1] then redis.call("SET", KEYS[2], ARGV[2]) return 1 else return 0 end`

var redisFencedSet = redis.NewScript(2, redisFencedSetSource)

type redisLock struct {
	cfg   config
	conn  redis.Conn
	key   string
	value string
}

func init() {
	peerSystems["redis"] = peerSystem{connect: connectRedis, leftover: redisLeftover}
}

func dialRedis(cfg config) (redis.Conn, error) {
	return redis.Dial("tcp", cfg.addr, redis.DialConnectTimeout(5*time.Second))
}

func connectRedis(cfg config, name string) (peerLocker, error) {
	c, err := dialRedis(cfg)
	if err != nil {
		return nil, err
	}
	return &redisLock{cfg: cfg, conn: c, key: name}, nil
}

func (l *redisLock) lock(done func() bool) error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	value := base64.StdEncoding.EncodeToString(b[:])
	for i := 0; l.cfg.tries <= 0 || i < l.cfg.tries; i++ {
		if i > 0 {
			time.Sleep(retryDelay(l.cfg))
			if done() {
				return errStopped
			}
		}
		_, err := redis.String(l.conn.Do("SET", l.key, value, "NX", "PX", l.cfg.expiry.Milliseconds()))
		if err == nil {
			l.value = value
			return nil
		}
		if !errors.Is(err, redis.ErrNil) {
			return err
		}
		// redsync runs its release script after every failed try (on one node it finds the
		// value is not its own and deletes nothing): one more round trip per try.
		if _, err := redisUnlock.Do(l.conn, l.key, value); err != nil {
			return err
		}
	}
	return errGaveUp
}

func (l *redisLock) unlock() error {
	n, err := redis.Int(redisUnlock.Do(l.conn, l.key, l.value))
	if err != nil {
		return err
	}
	if n != 1 {
		return errors.New("the lock had expired (its value was gone or another's)")
	}
	return nil
}

func (l *redisLock) close() { l.conn.Close() } // redigo: a second Close is harmless

func redisLeftover(cfg config) int64 {
	c, err := dialRedis(cfg)
	if err != nil {
		return -1
	}
	defer c.Close()
	keys, err := redis.Strings(c.Do("KEYS", cfg.prefix+"*"))
	if err != nil {
		return -1
	}
	return int64(len(keys))
}

func (l *redisLock) resetCounter() error {
	_, err := l.conn.Do("SET", counterName(l.cfg), 0)
	return err
}

func (l *redisLock) readCounter() (int64, error) {
	v, err := redis.Int64(l.conn.Do("GET", counterName(l.cfg)))
	if errors.Is(err, redis.ErrNil) {
		return 0, nil
	}
	return v, err
}

func (l *redisLock) writeCounter(v int64, fenced bool) (bool, error) {
	if !fenced {
		_, err := l.conn.Do("SET", counterName(l.cfg), v)
		return err == nil, err
	}
	n, err := redis.Int(redisFencedSet.Do(l.conn, l.key, counterName(l.cfg), l.value, v))
	return n == 1, err
}
