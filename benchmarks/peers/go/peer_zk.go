//go:build zk

package main

// ZooKeeper: go-zookeeper's zk.Lock (golang-github-samuel-go-zookeeper-dev), the recipe of
// ZooKeeper's documentation and Curator's InterProcessMutex: each Lock creates an ephemeral
// sequential node under the name and waits (an exists watch) for the node just before its own
// to go; Unlock deletes its node. A worker's connection is a ZooKeeper session with the
// timeout --ttl (the server caps it at 20 ticks: 40 s with the default 2 s tick), so a crashed
// holder's node goes when its session expires.

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/samuel/go-zookeeper/zk"
)

type zkLock struct {
	conn   *zk.Conn
	l      *zk.Lock
	closed sync.Once // zk.Conn.Close panics when called twice
}

type quietZKLogger struct{}

func (quietZKLogger) Printf(string, ...interface{}) {}

func init() {
	peerSystems["zk"] = peerSystem{connect: connectZK, setup: zkSetup, leftover: zkLeftover}
}

func dialZK(cfg config) (*zk.Conn, error) {
	conn, events, err := zk.Connect([]string{cfg.addr}, time.Duration(cfg.ttl)*time.Second,
		zk.WithLogger(quietZKLogger{}))
	if err != nil {
		return nil, err
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go func() { // the channel must be drained, or the connection blocks
					for range events {
					}
				}()
				return conn, nil
			}
		case <-deadline:
			conn.Close()
			return nil, fmt.Errorf("no ZooKeeper session with %s in 10 s", cfg.addr)
		}
	}
}

// zkSetup creates every lock's node and its parents before the clock starts: zk.Lock would
// create them on a worker's first Lock (an Exists and a Create per level, per worker) inside
// the measurement, as a long-lived deployment would not.
func zkSetup(cfg config) error {
	conn, err := dialZK(cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	for k := 0; k < cfg.locks; k++ {
		path := ""
		for _, part := range strings.Split(trimSlash(fmt.Sprintf("%slock-%d", cfg.prefix, k)), "/")[1:] {
			path += "/" + part
			if _, err := conn.Create(path, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
				return fmt.Errorf("create %s: %w", path, err)
			}
		}
	}
	return nil
}

func connectZK(cfg config, name string) (peerLocker, error) {
	conn, err := dialZK(cfg)
	if err != nil {
		return nil, err
	}
	return &zkLock{conn: conn, l: zk.NewLock(conn, trimSlash(name), zk.WorldACL(zk.PermAll))}, nil
}

func trimSlash(p string) string {
	for len(p) > 1 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}

func (l *zkLock) lock(func() bool) error { return l.l.Lock() }
func (l *zkLock) unlock() error          { return l.l.Unlock() }
func (l *zkLock) close()                 { l.closed.Do(l.conn.Close) }

// zkLeftover counts the lock nodes left under every name (the names themselves stay, as
// Curator's do).
func zkLeftover(cfg config) int64 {
	conn, err := dialZK(cfg)
	if err != nil {
		return -1
	}
	defer conn.Close()
	var n int64
	for k := 0; k < cfg.locks; k++ {
		children, _, err := conn.Children(trimSlash(fmt.Sprintf("%slock-%d", cfg.prefix, k)))
		if err == zk.ErrNoNode {
			continue
		}
		if err != nil {
			return -1
		}
		n += int64(len(children))
	}
	return n
}
