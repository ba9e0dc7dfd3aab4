package main

// --mode stale_write: one process of the paused-holder check of benchmarks/compare
// (docs/choosing-a-lock.md), for etcd's Go concurrency.Mutex and every peer system. It takes
// lock-0, reads a counter kept in the same system, says "read N", waits --hold (the script
// SIGSTOPs it inside that wait, past the lock's expiry), writes N+1 and says whether the write
// landed, then unlocks. Written plainly the write lands whoever holds the lock by then, and the
// increment of whoever took the lock during the pause is lost. With --fence the write is made
// conditional, in the same step, on this process still holding the lock, with what each
// system offers for it:
//   - etcd: a txn guarded by the mutex's IsOwner() compare (the key's create revision);
//   - redis: a script that writes only while the lock's key still has this holder's value;
//   - zk: a multi-op that checks this holder's lock node still exists before the write;
//   - pg_table: an UPDATE that only matches while this holder's row is in the lock table
//     and not expired;
//   - pg_advisory: none is needed (the lock lives as long as the holder's backend, and the
//     write goes over that backend), so --fence changes nothing.
// --mode counter prints the counter (after both processes are done).
// Output, one per line: "waited S", "read N", "write applied|rejected|failed: why",
// "unlock ok|failed: why".

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
)

// fencedCounter is the counter of the check, kept in the lock's own system.
type fencedCounter interface {
	resetCounter() error
	readCounter() (int64, error)
	// writeCounter stores v; fenced: only while this holder still holds the lock (false, nil
	// when that check refused it).
	writeCounter(v int64, fenced bool) (bool, error)
}

// counterName is where the counter lives, beside the lock names.
func counterName(cfg config) string { return cfg.prefix + "counter" }

// etcdLock is concurrency.Mutex behind the peer interface, for this check only.
type etcdLock struct {
	cfg config
	c   *clientv3.Client
	s   *concurrency.Session
	m   *concurrency.Mutex
}

func connectEtcd(cfg config, name string) (peerLocker, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: cfg.endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(c, concurrency.WithTTL(cfg.ttl))
	if err != nil {
		c.Close()
		return nil, err
	}
	return &etcdLock{cfg: cfg, c: c, s: s, m: concurrency.NewMutex(s, name)}, nil
}

func (l *etcdLock) lock(func() bool) error { return l.m.Lock(context.Background()) }
func (l *etcdLock) unlock() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return l.m.Unlock(ctx)
}
func (l *etcdLock) close() {
	l.s.Close()
	l.c.Close()
}

func (l *etcdLock) resetCounter() error {
	_, err := l.c.Put(context.Background(), counterName(l.cfg), "0")
	return err
}

func (l *etcdLock) readCounter() (int64, error) {
	r, err := l.c.Get(context.Background(), counterName(l.cfg))
	if err != nil || len(r.Kvs) == 0 {
		return 0, err
	}
	return strconv.ParseInt(string(r.Kvs[0].Value), 10, 64)
}

func (l *etcdLock) writeCounter(v int64, fenced bool) (bool, error) {
	put := clientv3.OpPut(counterName(l.cfg), strconv.FormatInt(v, 10))
	txn := l.c.Txn(context.Background())
	if fenced {
		txn = txn.If(l.m.IsOwner())
	}
	r, err := txn.Then(put).Commit()
	if err != nil {
		return false, err
	}
	return r.Succeeded, nil
}

func connectAny(cfg config, name string) (peerLocker, error) {
	if cfg.system == "etcd" {
		return connectEtcd(cfg, name)
	}
	sys := peerSystems[cfg.system]
	if sys.setup != nil {
		if err := sys.setup(cfg); err != nil {
			return nil, fmt.Errorf("setup: %w", err)
		}
	}
	return sys.connect(cfg, name)
}

// runStale is main for --mode stale_write and --mode counter; returns the exit status.
func runStale(cfg config) int {
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "go-bench: %s: %v\n", what, err)
		return 1
	}
	l, err := connectAny(cfg, cfg.prefix+"lock-0")
	if err != nil {
		return fail("connect", err)
	}
	defer l.close()
	fc, ok := l.(fencedCounter)
	if !ok {
		return fail("stale_write", errors.New(cfg.system+" keeps no counter"))
	}
	if cfg.mode == "counter" {
		v, err := fc.readCounter()
		if err != nil {
			return fail("read", err)
		}
		fmt.Println(v)
		return 0
	}
	if cfg.reset {
		if err := fc.resetCounter(); err != nil {
			return fail("reset", err)
		}
	}
	t0 := time.Now()
	for {
		err = l.lock(func() bool { return false })
		if err == nil {
			break
		}
		if !errors.Is(err, errGaveUp) {
			return fail("lock", err)
		}
	}
	fmt.Printf("waited %.3f\n", time.Since(t0).Seconds())
	v, err := fc.readCounter()
	if err != nil {
		return fail("read", err)
	}
	fmt.Printf("read %d\n", v)
	time.Sleep(cfg.hold)
	applied, err := fc.writeCounter(v+1, cfg.fence)
	switch {
	case err != nil:
		fmt.Printf("write failed: %v\n", err)
	case applied:
		fmt.Println("write applied")
	default:
		fmt.Println("write rejected")
	}
	if err := l.unlock(); err != nil {
		fmt.Printf("unlock failed: %v\n", err)
	} else {
		fmt.Println("unlock ok")
	}
	return 0
}
