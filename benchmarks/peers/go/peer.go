package main

// The lock services people pick instead of etcd (docs/choosing-a-lock.md), measured with the
// same workers, critical-section check, histogram and JSON as the etcd modes. Each worker has a
// connection of its own (for ZooKeeper a session, for PostgreSQL a backend) and takes one lock
// with the recipe people use on that system. The systems live in files built only with their
// tag (peer_redis.go: redis, peer_zk.go: zk, peer_pg.go: pg), so go-bench still builds when a
// client package is not installed; benchmarks/compare picks the tags.

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// peerLocker is one worker's handle on one lock name.
type peerLocker interface {
	// lock returns nil once held, errGaveUp when the recipe gave up (the worker tries again),
	// errStopped when done() turned true while it was waiting between tries.
	lock(done func() bool) error
	unlock() error
	close()
}

type peerSystem struct {
	connect func(cfg config, name string) (peerLocker, error)
	// setup prepares the server once before the workers connect and the clock starts (may be
	// nil): what a long-lived deployment has made already (a table, parent nodes).
	setup func(cfg config) error
	// leftover counts the lock entries the run left on the server (-1: could not tell).
	leftover func(cfg config) int64
}

// recoverer is a peerLocker that can go on after an error without a new connection (ZooKeeper:
// the session outlives a member); --keep-going tries it first.
type recoverer interface {
	recoverInPlace() bool
}

var (
	peerSystems = map[string]peerSystem{}
	errGaveUp   = errors.New("gave up")
	errStopped  = errors.New("run over")
)

func peerNames() []string {
	var out []string
	for n := range peerSystems {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// retryDelay is redsync's: uniform between --retry-min and --retry-max.
func retryDelay(cfg config) time.Duration {
	span := int64(cfg.retryMax - cfg.retryMin)
	if span <= 0 {
		return cfg.retryMin
	}
	return cfg.retryMin + time.Duration(rand.Int63n(span))
}

// peerLoop is one worker. On an error it closes its connection at once: a failed unlock may
// leave the lock held (an advisory lock, a ZooKeeper node) until the connection ends, and the
// other workers would wait for it for ever. With --keep-going it then connects again (every
// 100 ms until it can) and goes on; *l is the worker's connection of the moment.
func peerLoop(st *runState, sys peerSystem, l *peerLocker, slot *lockSlot) {
	got := 0
	defer func() {
		if got == 0 {
			atomic.AddInt64(&st.starved, 1)
		}
	}()
	failed := func(what string, err error) bool {
		st.fail(what, err)
		if r, ok := (*l).(recoverer); ok && st.cfg.keepGoing && r.recoverInPlace() {
			return true
		}
		(*l).close()
		if !st.cfg.keepGoing {
			return false
		}
		for !st.done() {
			time.Sleep(pauseAfterError)
			if nl, err := sys.connect(st.cfg, slot.name); err == nil {
				*l = nl
				return true
			}
		}
		return false
	}
	for !st.done() {
		t0 := time.Now()
		for {
			atomic.AddInt64(&st.attempts, 1)
			err := (*l).lock(st.done)
			if err == nil {
				break
			}
			if errors.Is(err, errStopped) {
				return
			}
			if !errors.Is(err, errGaveUp) {
				if failed("lock", err) {
					continue
				}
				return
			}
			atomic.AddInt64(&st.gaveUp, 1)
		}
		if st.recordAcquisition(t0) {
			got++
		}
		st.criticalSection(slot, *l)
		if err := (*l).unlock(); err != nil && !failed("unlock", err) {
			return
		}
	}
}

// runPeer is main for --system other than etcd; returns the exit status.
func runPeer(st *runState) int {
	cfg := st.cfg
	sys := peerSystems[cfg.system]
	if sys.setup != nil {
		if err := sys.setup(cfg); err != nil {
			st.fail("setup", err)
			printResult(st, cfg.label, 0, 0, -1, -1, noRPCs, nil)
			return 1
		}
	}
	for k := 0; k < cfg.locks; k++ {
		st.slots = append(st.slots, &lockSlot{name: cfg.prefix + "lock-" + strconv.Itoa(k)})
	}
	if cfg.mode == "hold" {
		return holdUntilKilled(st, sys)
	}
	// Connections first (as the etcd modes make sessions first); the clock starts when every
	// worker has one.
	lockers := make([]peerLocker, cfg.workers)
	var wg sync.WaitGroup
	for i := range lockers {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			l, err := sys.connect(cfg, st.slots[i%cfg.locks].name)
			if err != nil {
				st.fail("connect", err)
				return
			}
			lockers[i] = l
		}(i)
	}
	wg.Wait()
	cpuBefore := cpuSeconds()
	start := time.Now()
	st.end = start.Add(cfg.duration)
	if cfg.count > 0 {
		st.end = start.Add(24 * time.Hour)
	}
	for i, l := range lockers {
		if l == nil {
			continue
		}
		wg.Add(1)
		go func(l *peerLocker, slot *lockSlot) { defer wg.Done(); peerLoop(st, sys, l, slot) }(&lockers[i], st.slots[i%cfg.locks])
	}
	wg.Wait()
	st.idleUntilEnd()
	end := time.Now()
	if end.After(st.end) {
		end = st.end
	}
	cpuAfter := cpuSeconds()
	for _, l := range lockers {
		if l != nil {
			l.close()
		}
	}
	leftover := sys.leftover(cfg)
	st.countLostUpdates(st.acquisitions + st.late)
	cpuPer1000 := 0.0
	if served := st.acquisitions + st.late; served > 0 { // the CPU includes the late hand-offs
		cpuPer1000 = (cpuAfter - cpuBefore) / float64(served) * 1000
	}
	extra := map[string]interface{}{"system": cfg.system, "gave_up": st.gaveUp, "starved": st.starved}
	if cfg.system == "redis" || cfg.system == "pg_table" {
		extra["expiry_ms"] = cfg.expiry.Milliseconds()
		extra["retry_ms"] = []int64{cfg.retryMin.Milliseconds(), cfg.retryMax.Milliseconds()}
	}
	printResult(st, cfg.label, end.Sub(start).Seconds(), cpuPer1000, leftover, -1, noRPCs, extra)
	if st.violations != 0 || st.errs != 0 || leftover > 0 {
		return 1
	}
	return 0
}

func noRPCs(string) float64 { return -1 }

// holdUntilKilled takes the first lock, says "held" on stdout and waits: benchmarks/compare
// SIGKILLs it and times how long the next worker waits for the lock.
func holdUntilKilled(st *runState, sys peerSystem) int {
	l, err := sys.connect(st.cfg, st.slots[0].name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "go-bench: %v\n", err)
		return 1
	}
	for {
		err = l.lock(func() bool { return false })
		if err == nil {
			break
		}
		if !errors.Is(err, errGaveUp) {
			fmt.Fprintf(os.Stderr, "go-bench: lock: %v\n", err)
			return 1
		}
	}
	fmt.Println("held")
	for { // not select{}: with no other goroutine alive, Go would end the process as deadlocked
		time.Sleep(time.Hour)
	}
}
