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
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/samuel/go-zookeeper/zk"
)

type zkLock struct {
	cfg    config
	conn   *zk.Conn
	l      *zk.Lock
	name   string
	node   string    // this holder's lock node while it holds (the paused-holder check's fence)
	closed sync.Once // zk.Conn.Close panics when called twice
}

type quietZKLogger struct{}

func (quietZKLogger) Printf(string, ...interface{}) {}

func init() {
	peerSystems["zk"] = peerSystem{connect: connectZK, setup: zkSetup, leftover: zkLeftover}
}

func dialZK(cfg config) (*zk.Conn, error) {
	// --addr may list an ensemble's members, comma-separated: go-zookeeper picks one at random
	// and moves to another when it fails.
	conn, events, err := zk.Connect(strings.Split(cfg.addr, ","), time.Duration(cfg.ttl)*time.Second,
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
	return &zkLock{cfg: cfg, conn: conn, l: zk.NewLock(conn, trimSlash(name), zk.WorldACL(zk.PermAll)), name: trimSlash(name)}, nil
}

func trimSlash(p string) string {
	for len(p) > 1 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}

func (l *zkLock) lock(func() bool) error {
	if err := l.l.Lock(); err != nil {
		return err
	}
	if l.cfg.mode == "stale_write" { // zk.Lock keeps its node's path to itself
		return l.findNode()
	}
	return nil
}
func (l *zkLock) unlock() error { return l.l.Unlock() }
func (l *zkLock) close()        { l.closed.Do(l.conn.Close) }

// recoverInPlace (peer.go's recoverer, for --keep-going): a request lost with its connection
// (a member died) leaves the session alive, and go-zookeeper takes it to another member. So,
// as Curator does, keep the session: once it is back, delete this session's lock nodes under
// the name (a node made by a failed Lock, or the held one whose Unlock was lost) and start
// again with a new zk.Lock. Closing the session instead would leave those nodes blocking the
// queue until the session times out (40 s), since a closed connection cannot say goodbye.
func (l *zkLock) recoverInPlace() bool {
	for deadline := time.Now().Add(10 * time.Second); l.conn.State() != zk.StateHasSession; {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	children, _, err := l.conn.Children(l.name)
	if err != nil {
		return false
	}
	for _, c := range children {
		_, st, err := l.conn.Exists(l.name + "/" + c)
		if err == nil && st != nil && st.EphemeralOwner == l.conn.SessionID() {
			if err := l.conn.Delete(l.name+"/"+c, -1); err != nil && err != zk.ErrNoNode {
				return false
			}
		}
	}
	l.l = zk.NewLock(l.conn, l.name, zk.WorldACL(zk.PermAll))
	return true
}

// findNode finds this session's node under the lock's name.
func (l *zkLock) findNode() error {
	children, _, err := l.conn.Children(l.name)
	if err != nil {
		return err
	}
	for _, c := range children {
		_, st, err := l.conn.Exists(l.name + "/" + c)
		if err == nil && st != nil && st.EphemeralOwner == l.conn.SessionID() {
			l.node = l.name + "/" + c
			return nil
		}
	}
	return fmt.Errorf("no lock node of this session under %s", l.name)
}

func (l *zkLock) resetCounter() error {
	path := trimSlash(counterName(l.cfg))
	_, err := l.conn.Create(path, []byte("0"), 0, zk.WorldACL(zk.PermAll))
	if err == zk.ErrNodeExists {
		_, err = l.conn.Set(path, []byte("0"), -1)
	}
	return err
}

func (l *zkLock) readCounter() (int64, error) {
	data, _, err := l.conn.Get(trimSlash(counterName(l.cfg)))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(data), 10, 64)
}

// writeCounter: fenced, one multi-op checks that this holder's lock node still exists (a check
// of version -1 checks existence) before it sets the counter. A session that expired while the
// process was paused is replaced by go-zookeeper on the next request, which fails with
// ErrSessionExpired meanwhile: the write is tried again for up to 10 s, as a program that wants
// its write to land would.
func (l *zkLock) writeCounter(v int64, fenced bool) (bool, error) {
	path, data := trimSlash(counterName(l.cfg)), []byte(strconv.FormatInt(v, 10))
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if fenced {
			var ops []zk.MultiResponse
			ops, err = l.conn.Multi(&zk.CheckVersionRequest{Path: l.node, Version: -1},
				&zk.SetDataRequest{Path: path, Data: data, Version: -1})
			for i := 0; err == nil && i < len(ops); i++ {
				err = ops[i].Error // the check's own error comes first
			}
		} else {
			_, err = l.conn.Set(path, data, -1)
		}
		switch {
		case err == nil:
			return true, nil
		case fenced && (err == zk.ErrNoNode || err == zk.ErrBadVersion):
			return false, nil
		// (ErrNoServer: requests queued while the client goes round its server list to reconnect)
		case (err == zk.ErrSessionExpired || err == zk.ErrConnectionClosed || err == zk.ErrNoServer) &&
			time.Now().Before(deadline):
			time.Sleep(100 * time.Millisecond)
		default:
			return false, err
		}
	}
}

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
