// go-bench: the coetcd-bench workloads on etcd's own Go client (clientv3 and
// clientv3/concurrency from Debian's golang-etcd-server-dev, built in GOPATH mode), with the
// same flags, the same critical-section check, the same histogram and the same JSON fields, so
// benchmarks/run can put both side by side.
//
// Modes: mutex (concurrency.Mutex Lock/Unlock), election (concurrency.Election
// Campaign/Resign), txn (one put-if-absent txn + one delete, retried at once when taken),
// delete_chain (serial single-key deletes), rw (contrib/recipes' RWMutex), sem (a semaphore
// twin of coetcd::semaphore from clientv3 and a Session: etcd has no semaphore recipe). etcd
// 3.4's concurrency.Mutex has no TryLock, so try_lock is reported as unsupported. put, get and
// kv_txn are the client core's twin: each worker keeps one request in flight on a key of its
// own (put beforehand), kv_txn being a compare on the key's version, a put on success and a get
// otherwise; an "acquisition" there is one reply.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/bits"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
	recipe "go.etcd.io/etcd/contrib/recipes"
)

// histogram mirrors benchmarks/bench_support.hpp: exact below 128 µs, then 64 buckets per
// power of two.
type histogram struct {
	mu     sync.Mutex
	counts []uint64
	total  uint64
	max    uint64
	sum    uint64
}

func bucketIndex(v uint64) int {
	if v < 128 {
		return int(v)
	}
	msb := 63 - bits.LeadingZeros64(v)
	shift := msb - 6
	return 128 + (shift-1)*64 + int((v>>uint(shift))-64)
}

func bucketMidpoint(i int) float64 {
	if i < 128 {
		return float64(i)
	}
	shift := uint((i-128)/64 + 1)
	low := (uint64((i-128)%64) + 64) << shift
	return float64(low) + float64((uint64(1)<<shift)-1)/2
}

func (h *histogram) record(us uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := bucketIndex(us)
	for len(h.counts) <= i {
		h.counts = append(h.counts, 0)
	}
	h.counts[i]++
	h.total++
	h.sum += us
	if us > h.max {
		h.max = us
	}
}

func (h *histogram) quantile(q float64) float64 {
	if h.total == 0 {
		return 0
	}
	rank := uint64(q*float64(h.total-1)) + 1
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			m := bucketMidpoint(i)
			if m > float64(h.max) {
				return float64(h.max)
			}
			return m
		}
	}
	return float64(h.max)
}

type lockSlot struct {
	name    string
	mu      sync.Mutex
	inside  int
	readers int // rw mode: readers inside
	holder  interface{}
	counter int64
	// When the last holder left the critical section: the next entry's distance from it is how
	// long the name sat free, or unreachable, while workers wanted it (max_idle_ms).
	freeSince time.Time
	// With -share-session, the goroutines of one session first take this session's sync.Mutex
	// for the name, then concurrency.Mutex: what a Go server does today, since a session
	// shares a concurrency.Mutex with itself.
	localMu sync.Mutex
	local   map[*concurrency.Session]*sync.Mutex
}

func (slot *lockSlot) localFor(s *concurrency.Session) *sync.Mutex {
	slot.localMu.Lock()
	defer slot.localMu.Unlock()
	if slot.local == nil {
		slot.local = map[*concurrency.Session]*sync.Mutex{}
	}
	if slot.local[s] == nil {
		slot.local[s] = &sync.Mutex{}
	}
	return slot.local[s]
}

type config struct {
	endpoints    []string
	mode         string
	workers      int
	locks        int
	clients      int
	duration     time.Duration
	count        int64
	hold         time.Duration
	ttl          int
	shareSession bool
	// -pass-local (held.go): the session holds the etcd lock while its goroutines pass a
	// sync.Mutex, within coetcd's fairness bounds.
	passLocal    bool
	fairHold     time.Duration
	fairHandoffs int
	permits      int64 // sem mode
	json         bool
	prefix       string
	startAt      int64 // Unix ms: measuring starts then (-start-at)
	// Another lock service instead of etcd (peer.go): its address, and the knobs of the
	// recipes that poll (Redis, the PostgreSQL lock table).
	system   string
	label    string // "impl" in the JSON: the system, or a variant's name (redis_aof_always)
	addr     string
	expiry   time.Duration
	retryMin time.Duration
	retryMax time.Duration
	tries    int
	// --mode stale_write (stale.go)
	fence bool
	reset bool
	// On an error a worker counts it, waits 100 ms, reconnects (peers; a new session when
	// etcd's was lost) and goes on, as a service does through its lock server's failover (the
	// one-server-down row of benchmarks/compare). Without it a worker's first error ends it.
	keepGoing bool
}

type runState struct {
	cfg          config
	wait         histogram
	readWait     histogram // rw mode, by side
	writeWait    histogram
	writes       int64
	slots        []*lockSlot
	end          time.Time
	acquisitions int64
	attempts     int64
	errs         int64
	violations   int64
	gaveUp       int64 // peers: times a recipe gave up and its worker asked again
	late         int64 // acquisitions after the end: not counted, but in the counters
	starved      int64 // peers: workers that got no acquisition before the end
	maxIdleUs    int64 // the longest time a name sat free between two holders (see lockSlot)
	firstError   atomic.Value
}

// noteIdle keeps the longest idle time seen, in µs.
func (st *runState) noteIdle(d time.Duration) {
	us := d.Microseconds()
	for {
		old := atomic.LoadInt64(&st.maxIdleUs)
		if us <= old || atomic.CompareAndSwapInt64(&st.maxIdleUs, old, us) {
			return
		}
	}
}

// idleUntilEnd counts each name's time free from its last release to the end of the run (a
// name that never came back after a fault).
func (st *runState) idleUntilEnd() {
	for _, s := range st.slots {
		s.mu.Lock()
		if s.inside == 0 && !s.freeSince.IsZero() && s.freeSince.Before(st.end) {
			st.noteIdle(st.end.Sub(s.freeSince))
		}
		s.mu.Unlock()
	}
}

// pauseAfterError is --keep-going's wait before a worker tries again.
const pauseAfterError = 100 * time.Millisecond

func (st *runState) done() bool {
	if st.cfg.count > 0 && atomic.LoadInt64(&st.acquisitions) >= st.cfg.count {
		return true
	}
	return time.Now().After(st.end)
}

func (st *runState) fail(what string, err error) {
	if atomic.AddInt64(&st.errs, 1) == 1 {
		st.firstError.Store(what + ": " + err.Error())
	}
}

// countLostUpdates adds to the violations every increment of the counters that went missing
// (or appeared) against the expected number of critical sections.
func (st *runState) countLostUpdates(expected int64) {
	var counted int64
	for _, s := range st.slots {
		counted += s.counter
	}
	if d := counted - expected; d != 0 {
		if d < 0 {
			d = -d
		}
		st.violations += d
	}
}

// recordAcquisition counts one acquisition and its wait; false when it came after the end.
func (st *runState) recordAcquisition(t0 time.Time) bool {
	// A waiter served after the end is not counted (as in coetcd-bench): the waiters still
	// queued at the end each take the lock once on their way out.
	if time.Now().After(st.end) {
		atomic.AddInt64(&st.late, 1)
		return false
	}
	atomic.AddInt64(&st.acquisitions, 1)
	st.wait.record(uint64(time.Since(t0).Microseconds()))
	return true
}

// criticalSection: read the counter, yield (or hold), write it back; another holder inside at
// the same time, or an update lost to one, is a violation (for elections, another session).
func (st *runState) criticalSection(slot *lockSlot, who interface{}) {
	slot.mu.Lock()
	if slot.inside > 0 && slot.holder != who {
		atomic.AddInt64(&st.violations, 1)
	}
	if slot.inside == 0 && !slot.freeSince.IsZero() && time.Now().Before(st.end) {
		st.noteIdle(time.Since(slot.freeSince))
	}
	slot.inside++
	slot.holder = who
	seen := slot.counter
	slot.mu.Unlock()
	if st.cfg.hold > 0 {
		time.Sleep(st.cfg.hold)
	} else {
		runtime.Gosched()
	}
	slot.mu.Lock()
	if slot.counter != seen && !(st.cfg.shareSession && st.cfg.mode == "election") {
		atomic.AddInt64(&st.violations, 1)
	}
	slot.counter = seen + 1
	slot.inside--
	if slot.inside == 0 {
		slot.freeSince = time.Now()
	}
	slot.mu.Unlock()
}

func mutexLoop(st *runState, c *clientv3.Client, s *concurrency.Session, slot *lockSlot) {
	m := concurrency.NewMutex(s, slot.name)
	ctx := context.Background()
	var local *sync.Mutex
	if st.cfg.shareSession {
		local = slot.localFor(s)
	}
	first := s
	defer func() { // main closes the sessions it made; this one closes those it made itself
		if s != first {
			s.Close()
		}
	}()
	// failed counts an error; with --keep-going it waits, replaces a lost session and says go on.
	failed := func(what string, err error) bool {
		st.fail(what, err)
		if !st.cfg.keepGoing {
			return false
		}
		time.Sleep(pauseAfterError)
		select {
		case <-s.Done():
			if ns, err := concurrency.NewSession(c, concurrency.WithTTL(st.cfg.ttl)); err == nil {
				s = ns
				m = concurrency.NewMutex(s, slot.name)
			}
		default:
		}
		return true
	}
	for !st.done() {
		t0 := time.Now()
		atomic.AddInt64(&st.attempts, 1)
		if local != nil {
			local.Lock()
		}
		if err := m.Lock(ctx); err != nil {
			if local != nil {
				local.Unlock()
			}
			if failed("lock", err) {
				continue
			}
			return
		}
		st.recordAcquisition(t0)
		st.criticalSection(slot, m)
		err := m.Unlock(ctx)
		if local != nil {
			local.Unlock()
		}
		if err != nil && !failed("unlock", err) {
			return
		}
	}
}

func electionLoop(st *runState, s *concurrency.Session, slot *lockSlot) {
	e := concurrency.NewElection(s, slot.name)
	ctx := context.Background()
	for !st.done() {
		t0 := time.Now()
		atomic.AddInt64(&st.attempts, 1)
		if err := e.Campaign(ctx, "bench"); err != nil {
			st.fail("campaign", err)
			return
		}
		st.recordAcquisition(t0)
		st.criticalSection(slot, s)
		if err := e.Resign(ctx); err != nil {
			st.fail("resign", err)
			return
		}
	}
}

// rwLoop: recipe.RWMutex (contrib/recipes), a writer or a reader for the whole run. A writer
// inside with anyone else, or a reader inside with a writer, is a violation; writers count.
func rwLoop(st *runState, s *concurrency.Session, slot *lockSlot, write bool) {
	m := recipe.NewRWMutex(s, slot.name)
	for !st.done() {
		t0 := time.Now()
		atomic.AddInt64(&st.attempts, 1)
		var err error
		if write {
			err = m.Lock()
		} else {
			err = m.RLock()
		}
		if err != nil {
			st.fail("lock", err)
			return
		}
		st.recordAcquisition(t0)
		waited := uint64(time.Since(t0).Microseconds())
		slot.mu.Lock()
		if write {
			st.writeWait.record(waited)
			if slot.inside > 0 || slot.readers > 0 {
				atomic.AddInt64(&st.violations, 1)
			}
			slot.inside++
		} else {
			st.readWait.record(waited)
			if slot.inside > 0 {
				atomic.AddInt64(&st.violations, 1)
			}
			slot.readers++
		}
		seen := slot.counter
		slot.mu.Unlock()
		if st.cfg.hold > 0 {
			time.Sleep(st.cfg.hold)
		} else {
			runtime.Gosched()
		}
		slot.mu.Lock()
		if write {
			if slot.counter != seen {
				atomic.AddInt64(&st.violations, 1)
			}
			slot.counter = seen + 1
			slot.inside--
			atomic.AddInt64(&st.writes, 1)
		} else {
			slot.readers--
		}
		slot.mu.Unlock()
		if write {
			err = m.Unlock()
		} else {
			err = m.RUnlock()
		}
		if err != nil {
			st.fail("unlock", err)
			return
		}
	}
}

// semSeq numbers the semaphore keys of this process (unique under each lease, also when
// workers share a session).
var semSeq int64

// semAcquire: the semaphore as a Go user builds it from clientv3, with coetcd::semaphore's keys
// and rule (NAME/<lease hex>_<seq hex> = "<n>/<permits>"; keys in create-revision order, then
// key order, take permits in turn). A put-if-absent txn, then Get the prefix sorted by create
// revision; while our key does not fit, Watch the prefix from after that Get for a delete (as
// contrib/recipes' waitDeletes does) and Get again. The Get has no limit: etcd returns keys of
// one revision in any order, and a limit could cut the group ours is in.
func semAcquire(ctx context.Context, c *clientv3.Client, s *concurrency.Session, pfx, key string, permits int64) error {
	val := fmt.Sprintf("1/%d", permits)
	if _, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, val, clientv3.WithLease(s.Lease()))).Commit(); err != nil {
		return err
	}
	fits := func() (int64, bool, error) {
		g, err := c.Get(ctx, pfx, clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			return 0, false, err
		}
		kvs := g.Kvs
		sort.SliceStable(kvs, func(i, j int) bool {
			if kvs[i].CreateRevision != kvs[j].CreateRevision {
				return kvs[i].CreateRevision < kvs[j].CreateRevision
			}
			return string(kvs[i].Key) < string(kvs[j].Key)
		})
		var used int64
		for _, kv := range kvs {
			n, perr := strconv.ParseInt(strings.SplitN(string(kv.Value), "/", 2)[0], 10, 64)
			if perr != nil || n < 1 {
				return 0, false, fmt.Errorf("%s is not a semaphore key", kv.Key)
			}
			used += n
			if string(kv.Key) == key {
				break
			}
		}
		return g.Header.Revision, used <= permits, nil
	}
	rev, ok, err := fits()
	if err != nil || ok {
		return err
	}
	// One watch for the whole wait, from just after the first look, so no delete is missed.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range c.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterPut()) {
		if err := wr.Err(); err != nil {
			return err
		}
		if len(wr.Events) == 0 {
			continue
		}
		if _, ok, err = fits(); err != nil || ok {
			return err
		}
	}
	return ctx.Err()
}

// semLoop: one permit per acquisition; more than -permits holders inside at once is a violation
// (an over-admission).
func semLoop(st *runState, c *clientv3.Client, s *concurrency.Session, slot *lockSlot) {
	ctx := context.Background()
	pfx := slot.name + "/"
	for !st.done() {
		t0 := time.Now()
		atomic.AddInt64(&st.attempts, 1)
		key := fmt.Sprintf("%s%x_%x", pfx, int64(s.Lease()), atomic.AddInt64(&semSeq, 1))
		if err := semAcquire(ctx, c, s, pfx, key, st.cfg.permits); err != nil {
			st.fail("acquire", err)
			return
		}
		st.recordAcquisition(t0)
		slot.mu.Lock()
		slot.inside++
		if int64(slot.inside) > st.cfg.permits {
			atomic.AddInt64(&st.violations, 1)
		}
		slot.mu.Unlock()
		if st.cfg.hold > 0 {
			time.Sleep(st.cfg.hold)
		} else {
			runtime.Gosched()
		}
		slot.mu.Lock()
		slot.inside--
		slot.mu.Unlock()
		if _, err := c.Delete(ctx, key); err != nil {
			st.fail("release", err)
			return
		}
	}
}

func txnLoop(st *runState, c *clientv3.Client, s *concurrency.Session, slot *lockSlot) {
	key := slot.name + "/txn"
	ctx := context.Background()
	for !st.done() {
		t0 := time.Now()
		taken := false
		for !taken && !st.done() {
			atomic.AddInt64(&st.attempts, 1)
			r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.Version(key), "=", 0)).
				Then(clientv3.OpPut(key, "", clientv3.WithLease(s.Lease()))).Commit()
			if err != nil {
				st.fail("txn", err)
				return
			}
			taken = r.Succeeded
			if !taken {
				runtime.Gosched()
			}
		}
		if !taken {
			return
		}
		st.recordAcquisition(t0)
		st.criticalSection(slot, s)
		if _, err := c.Delete(ctx, key); err != nil {
			st.fail("delete", err)
			return
		}
	}
}

func kvMode(mode string) bool { return mode == "put" || mode == "get" || mode == "kv_txn" }

// kvLoop: one request after another on the worker's own key.
func kvLoop(st *runState, c *clientv3.Client, key string) {
	ctx := context.Background()
	for !st.done() {
		t0 := time.Now()
		atomic.AddInt64(&st.attempts, 1)
		var err error
		switch st.cfg.mode {
		case "put":
			_, err = c.Put(ctx, key, "v")
		case "get":
			var r *clientv3.GetResponse
			if r, err = c.Get(ctx, key); err == nil && len(r.Kvs) != 1 {
				atomic.AddInt64(&st.violations, 1)
			}
		default:
			var r *clientv3.TxnResponse
			r, err = c.Txn(ctx).If(clientv3.Compare(clientv3.Version(key), ">", 0)).
				Then(clientv3.OpPut(key, "v")).Else(clientv3.OpGet(key)).Commit()
			if err == nil && !r.Succeeded {
				atomic.AddInt64(&st.violations, 1)
			}
		}
		if err != nil {
			st.fail(st.cfg.mode, err)
			return
		}
		st.recordAcquisition(t0)
	}
}

func deleteChainLoop(st *runState, c *clientv3.Client, paused *time.Duration) {
	ctx := context.Background()
	base := st.cfg.prefix + "chain/"
	n := 0
	for !st.done() {
		keys := make([]string, 0, 100)
		for i := 0; i < 100; i++ {
			keys = append(keys, base+strconv.Itoa(n))
			n++
		}
		pauseStart := time.Now()
		for _, k := range keys {
			if _, err := c.Put(ctx, k, ""); err != nil {
				st.fail("put", err)
				return
			}
		}
		p := time.Since(pauseStart)
		st.end = st.end.Add(p)
		*paused += p
		for _, k := range keys {
			if st.done() {
				break
			}
			t0 := time.Now()
			if _, err := c.Delete(ctx, k); err != nil {
				st.fail("delete", err)
				return
			}
			st.recordAcquisition(t0)
		}
	}
	c.Delete(ctx, base, clientv3.WithPrefix())
}

// grpcMessagesReceived: grpc_server_msg_received_total per method from etcd's /metrics.
func grpcMessagesReceived(endpoint string) map[string]float64 {
	if !strings.Contains(endpoint, "://") {
		endpoint = "http://" + endpoint
	}
	resp, err := http.Get(endpoint + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "grpc_server_msg_received_total{") {
			continue
		}
		i := strings.Index(line, `grpc_method="`)
		sp := strings.LastIndex(line, " ")
		if i < 0 || sp < 0 {
			continue
		}
		i += len(`grpc_method="`)
		method := line[i : i+strings.Index(line[i:], `"`)]
		v, _ := strconv.ParseFloat(line[sp+1:], 64)
		out[method] += v
	}
	return out
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

func peakRSSMB() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Maxrss) / 1024
}

// parseDuration accepts what coetcd-bench accepts: "5s", "250ms", "2m", "90" (seconds).
func parseDuration(s string) (time.Duration, error) {
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Duration(v * float64(time.Second)), nil
	}
	return time.ParseDuration(s)
}

func parseArgs() (config, error) {
	var cfg config
	var endpoints, duration, hold string
	flag.StringVar(&endpoints, "endpoints", "127.0.0.1:2379", "comma-separated host:port list")
	flag.StringVar(&cfg.mode, "mode", "mutex", "mutex | hold (--system other than etcd: take lock-0, print \"held\", wait to be killed) | stale_write, counter (the paused-holder check, stale.go) | election | txn | delete_chain | rw (recipe.RWMutex; worker i writes when i % 10 == 0) | sem (one of -permits per acquisition) | stm (concurrency.NewSTM increments of -locks counters, stm.go) | queue (-workers producers and consumers on one recipe.Queue, queue.go)")
	flag.Int64Var(&cfg.permits, "permits", 10, "sem: permits of each semaphore")
	flag.IntVar(&cfg.workers, "workers", 1, "concurrent workers")
	flag.IntVar(&cfg.locks, "locks", 1, "lock names; worker i uses lock i % locks")
	flag.IntVar(&cfg.clients, "clients", 1, "clients; worker i uses client i % clients")
	flag.StringVar(&duration, "duration", "5s", "measured run time")
	flag.Int64Var(&cfg.count, "count", 0, "stop after this many acquisitions instead")
	flag.StringVar(&hold, "hold", "0s", "time inside the critical section (default: one yield)")
	flag.IntVar(&cfg.ttl, "ttl", 60, "session TTL in seconds")
	flag.BoolVar(&cfg.shareSession, "share-session", false, "one session per client shared by its workers")
	flag.BoolVar(&cfg.passLocal, "pass-local", false, "mutex -share-session: the session holds concurrency.Mutex while its goroutines pass a sync.Mutex (held.go)")
	flag.DurationVar(&cfg.fairHold, "fair-hold", 50*time.Millisecond, "-pass-local: give the lock up after this long when another session waits")
	flag.IntVar(&cfg.fairHandoffs, "fair-handoffs", 1000, "-pass-local: give the lock up after this many hand-offs when another session waits")
	flag.StringVar(&cfg.prefix, "prefix", "", "key prefix (default /coetcd-bench/go-<pid>/)")
	flag.Int64Var(&cfg.startAt, "start-at", 0, "start measuring at this Unix time in ms, once ready (a fleet of processes measuring one window)")
	flag.BoolVar(&cfg.json, "json", false, "print one JSON object")
	var expiry, retryMin, retryMax string
	flag.StringVar(&cfg.system, "system", "etcd", "etcd | "+strings.Join(peerNames(), " | ")+" (mode mutex only; see peer.go)")
	flag.StringVar(&cfg.label, "label", "", "name of this variant in the results (default: the system)")
	flag.StringVar(&cfg.addr, "addr", "", "the other system's address: host:port (redis, zk) or a lib/pq connection string (pg_*)")
	flag.StringVar(&expiry, "expiry", "8s", "redis, pg_table: the lock's expiry (redsync's default: 8 s)")
	flag.StringVar(&retryMin, "retry-min", "50ms", "redis, pg_table: shortest wait between tries (redsync: 50 ms)")
	flag.StringVar(&retryMax, "retry-max", "250ms", "redis, pg_table: longest wait between tries (redsync: 250 ms)")
	flag.BoolVar(&cfg.fence, "fence", false, "stale_write: write only while still holding the lock (see stale.go)")
	flag.BoolVar(&cfg.reset, "reset", false, "stale_write: set the counter to 0 first")
	flag.BoolVar(&cfg.keepGoing, "keep-going", false, "mutex: on an error a worker counts it, waits 100 ms, reconnects and goes on (default: its first error ends it)")
	flag.IntVar(&cfg.tries, "tries", 32, "redis: tries before Lock gives up (redsync: 32; the worker then calls Lock again)")
	flag.Parse()
	for _, d := range []struct {
		s   string
		out *time.Duration
	}{{expiry, &cfg.expiry}, {retryMin, &cfg.retryMin}, {retryMax, &cfg.retryMax}} {
		v, err := parseDuration(d.s)
		if err != nil {
			return cfg, fmt.Errorf("bad duration %q", d.s)
		}
		*d.out = v
	}
	for _, e := range strings.Split(endpoints, ",") {
		if e != "" {
			cfg.endpoints = append(cfg.endpoints, e)
		}
	}
	var err error
	if cfg.duration, err = parseDuration(duration); err != nil {
		return cfg, fmt.Errorf("bad --duration %q", duration)
	}
	if cfg.hold, err = parseDuration(hold); err != nil {
		return cfg, fmt.Errorf("bad --hold %q", hold)
	}
	if cfg.prefix == "" {
		cfg.prefix = fmt.Sprintf("/coetcd-bench/go-%d/", os.Getpid())
	}
	switch cfg.mode {
	case "mutex", "election", "txn", "delete_chain", "put", "get", "kv_txn":
	case "stm", "queue":
		return cfg, nil
	case "stale_write", "counter":
		if _, ok := peerSystems[cfg.system]; cfg.system != "etcd" && !ok {
			return cfg, fmt.Errorf("unknown --system %q (this build has: etcd %s)", cfg.system, strings.Join(peerNames(), " "))
		}
		if cfg.system != "etcd" && cfg.addr == "" {
			return cfg, errors.New("--system other than etcd needs --addr")
		}
		if cfg.label == "" {
			cfg.label = cfg.system
		}
		return cfg, nil
	case "hold":
		if cfg.system == "etcd" {
			return cfg, errors.New("hold: for etcd, `coetcd lock NAME` holds a lock")
		}
	case "sem":
		if cfg.permits < 1 {
			return cfg, errors.New("--permits must be >= 1")
		}
	case "rw":
		// (-share-session needs no local lock here, unlike mutex: recipe.RWMutex puts a key of
		// its own for every Lock and RLock, so goroutines of one session exclude each other.)
	case "try_lock":
		return cfg, errors.New("try_lock: etcd 3.4's concurrency.Mutex has no TryLock")
	default:
		return cfg, fmt.Errorf("unknown --mode %q", cfg.mode)
	}
	if cfg.passLocal && (cfg.mode != "mutex" || !cfg.shareSession) {
		return cfg, errors.New("-pass-local goes with --mode mutex and -share-session")
	}
	if cfg.system != "etcd" {
		if _, ok := peerSystems[cfg.system]; !ok {
			return cfg, fmt.Errorf("unknown --system %q (this build has: etcd %s)", cfg.system, strings.Join(peerNames(), " "))
		}
		if (cfg.mode != "mutex" && cfg.mode != "hold") || cfg.shareSession || cfg.addr == "" {
			return cfg, errors.New("--system other than etcd: --mode mutex or hold, no --share-session, and --addr")
		}
		if cfg.label == "" {
			cfg.label = cfg.system
		}
		if cfg.retryMax < cfg.retryMin {
			return cfg, errors.New("--retry-max below --retry-min")
		}
	}
	if cfg.workers < 1 || cfg.locks < 1 || cfg.clients < 1 || len(cfg.endpoints) == 0 {
		return cfg, errors.New("--workers, --locks, --clients must be >= 1 and --endpoints non-empty")
	}
	if cfg.mode == "delete_chain" {
		cfg.workers, cfg.locks = 1, 1
	}
	return cfg, nil
}

func main() {
	cfg, err := parseArgs()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go-bench: %v\n", err)
		os.Exit(2)
	}
	if cfg.mode == "stale_write" || cfg.mode == "counter" {
		os.Exit(runStale(cfg))
	}
	if cfg.mode == "stm" {
		os.Exit(runSTM(cfg))
	}
	if cfg.mode == "queue" {
		os.Exit(runQueue(cfg))
	}
	st := &runState{cfg: cfg}
	st.firstError.Store("")
	if cfg.system != "etcd" {
		os.Exit(runPeer(st))
	}
	clients := make([]*clientv3.Client, cfg.clients)
	for i := range clients {
		c, err := clientv3.New(clientv3.Config{Endpoints: cfg.endpoints, DialTimeout: 5 * time.Second})
		if err != nil {
			fmt.Fprintf(os.Stderr, "go-bench: client: %v\n", err)
			os.Exit(1)
		}
		clients[i] = c
	}
	for k := 0; k < cfg.locks; k++ {
		st.slots = append(st.slots, &lockSlot{name: cfg.prefix + "lock-" + strconv.Itoa(k)})
	}

	// Sessions first (as coetcd-bench does); the clock starts when every worker has one.
	shared := make([]*concurrency.Session, cfg.clients)
	if cfg.shareSession {
		for i := range shared {
			s, err := concurrency.NewSession(clients[i], concurrency.WithTTL(cfg.ttl))
			if err != nil {
				fmt.Fprintf(os.Stderr, "go-bench: session: %v\n", err)
				os.Exit(1)
			}
			shared[i] = s
		}
	}
	ramp := time.Now()
	sessions := make([]*concurrency.Session, cfg.workers)
	var wg sync.WaitGroup
	if kvMode(cfg.mode) {
		for i := 0; i < cfg.workers; i++ {
			if _, err := clients[i%cfg.clients].Put(context.Background(), kvKey(cfg, i), "v"); err != nil {
				fmt.Fprintf(os.Stderr, "go-bench: put: %v\n", err)
				os.Exit(1)
			}
		}
	} else if cfg.mode != "delete_chain" {
		for i := 0; i < cfg.workers; i++ {
			if cfg.shareSession {
				sessions[i] = shared[i%cfg.clients]
				continue
			}
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				s, err := concurrency.NewSession(clients[i%cfg.clients], concurrency.WithTTL(cfg.ttl))
				if err != nil {
					st.fail("session", err)
					return
				}
				sessions[i] = s
			}(i)
		}
		wg.Wait()
	}
	if !cfg.json || cfg.workers >= 100 {
		fmt.Fprintf(os.Stderr, "go-bench: %d workers ready in %.2f s; measuring\n", cfg.workers, time.Since(ramp).Seconds())
	}
	if cfg.startAt > 0 { // a fleet: every process measures the same window (benchmarks/fleet)
		if wait := time.Until(time.UnixMilli(cfg.startAt)); wait > 0 {
			time.Sleep(wait)
		} else {
			fmt.Fprintf(os.Stderr, "go-bench: ready %.2f s after -start-at\n", -wait.Seconds())
		}
	}
	before := grpcMessagesReceived(cfg.endpoints[0])
	cpuBefore := cpuSeconds()
	start := time.Now()
	st.end = start.Add(cfg.duration)
	if cfg.count > 0 {
		st.end = start.Add(24 * time.Hour)
	}
	var paused time.Duration
	if cfg.mode == "delete_chain" {
		wg.Add(1)
		go func() { defer wg.Done(); deleteChainLoop(st, clients[0], &paused) }()
	}
	for i := 0; i < cfg.workers && kvMode(cfg.mode); i++ {
		wg.Add(1)
		go func(i int) { defer wg.Done(); kvLoop(st, clients[i%cfg.clients], kvKey(cfg, i)) }(i)
	}
	for i := 0; i < cfg.workers && cfg.mode != "delete_chain" && !kvMode(cfg.mode); i++ {
		s := sessions[i]
		if s == nil {
			continue
		}
		wg.Add(1)
		go func(i int, s *concurrency.Session) {
			defer wg.Done()
			slot := st.slots[i%cfg.locks]
			switch cfg.mode {
			case "mutex":
				if cfg.passLocal {
					heldLoop(st, clients[i%cfg.clients], s, slot)
				} else {
					mutexLoop(st, clients[i%cfg.clients], s, slot)
				}
			case "election":
				electionLoop(st, s, slot)
			case "txn":
				txnLoop(st, clients[i%cfg.clients], s, slot)
			case "rw":
				rwLoop(st, s, slot, i%10 == 0)
			case "sem":
				semLoop(st, clients[i%cfg.clients], s, slot)
			}
		}(i, s)
	}
	stopProgress := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				fmt.Fprintf(os.Stderr, "go-bench: %.0f s, %d acquisitions\n", time.Since(start).Seconds(),
					atomic.LoadInt64(&st.acquisitions))
			}
		}
	}()
	wg.Wait()
	close(stopProgress)
	st.idleUntilEnd()
	end := time.Now()
	if end.After(st.end) {
		end = st.end
	}
	cpuAfter := cpuSeconds()
	after := grpcMessagesReceived(cfg.endpoints[0])

	closed := map[*concurrency.Session]bool{}
	for _, s := range append(sessions, shared...) {
		if s != nil && !closed[s] {
			closed[s] = true
			s.Close()
		}
	}
	if kvMode(cfg.mode) {
		clients[0].Delete(context.Background(), cfg.prefix+"kv/", clientv3.WithPrefix())
	}
	leftover := int64(-1)
	if r, err := clients[0].Get(context.Background(), cfg.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
		leftover = r.Count
	}
	for _, c := range clients {
		c.Close()
	}

	elapsed := end.Sub(start).Seconds() - paused.Seconds()
	// CPU and RPCs were spent on the late hand-offs too: per acquisition, count them.
	acq := float64(st.acquisitions + st.late)
	expected := st.acquisitions + st.late
	if cfg.mode == "rw" {
		expected = st.writes
	}
	// (A semaphore's holders overlap by design: semLoop counts over-admissions instead.)
	if cfg.mode != "delete_chain" && cfg.mode != "sem" && !kvMode(cfg.mode) && !(cfg.shareSession && cfg.mode == "election") {
		st.countLostUpdates(expected)
	}
	perAcq := func(method string) float64 {
		if acq == 0 || after == nil {
			return -1
		}
		return (after[method] - before[method]) / acq
	}
	rpcs := -1.0
	if acq > 0 && after != nil {
		rpcs = 0
		for m, v := range after {
			rpcs += v - before[m]
		}
		rpcs /= acq
	}
	cpuPer1000 := 0.0
	if acq > 0 {
		cpuPer1000 = (cpuAfter - cpuBefore) / acq * 1000
	}
	printResult(st, "go", elapsed, cpuPer1000, leftover, rpcs, perAcq, nil)
	if st.violations != 0 || st.errs != 0 || leftover > 0 {
		os.Exit(1)
	}
}

// printResult prints one cell as JSON (benchmarks/run) or as text. rpcs and perAcq are -1 where
// the system has no gRPC metrics to count; extra adds fields.
func printResult(st *runState, impl string, elapsed, cpuPer1000 float64, leftover int64, rpcs float64,
	perAcq func(string) float64, extra map[string]interface{}) {
	cfg := st.cfg
	opsPerS := 0.0
	if elapsed > 0 {
		opsPerS = float64(st.acquisitions) / elapsed
	}
	ms := func(us float64) float64 { return us / 1000 }
	firstError := st.firstError.Load().(string)
	if cfg.json {
		out := map[string]interface{}{
			"impl": impl, "mode": cfg.mode, "workers": cfg.workers, "locks": cfg.locks, "clients": cfg.clients,
			"share_session": cfg.shareSession, "linger_ms": 0, "hold_ms": float64(cfg.hold.Microseconds()) / 1000,
			"seconds": elapsed, "acquisitions": st.acquisitions, "attempts": st.attempts,
			"acquisitions_per_s": opsPerS, "p50_ms": ms(st.wait.quantile(0.5)), "p90_ms": ms(st.wait.quantile(0.9)),
			"p99_ms": ms(st.wait.quantile(0.99)), "max_ms": ms(float64(st.wait.max)),
			"mean_ms":        ms(float64(st.wait.sum) / float64(max64(1, st.wait.total))),
			"cpu_s_per_1000": cpuPer1000, "peak_rss_mb": peakRSSMB(), "rpcs_per_acq": rpcs,
			"txn_per_acq": perAcq("Txn"), "range_per_acq": perAcq("Range"), "delete_per_acq": perAcq("DeleteRange"),
			"watch_msgs_per_acq": perAcq("Watch"), "violations": st.violations, "errors": st.errs,
			"leftover_keys": leftover, "first_error": firstError, "permits": 0, "completions": "",
			"late": st.late, "max_idle_ms": float64(atomic.LoadInt64(&st.maxIdleUs)) / 1000,
			"keep_going": cfg.keepGoing, "pass_local": cfg.passLocal,
		}
		if cfg.mode == "sem" {
			out["permits"] = cfg.permits
		}
		if cfg.mode == "rw" {
			out["read_p50_ms"], out["read_p99_ms"] = ms(st.readWait.quantile(0.5)), ms(st.readWait.quantile(0.99))
			out["write_p50_ms"], out["write_p99_ms"] = ms(st.writeWait.quantile(0.5)), ms(st.writeWait.quantile(0.99))
			out["writes"] = st.writes
		}
		for k, v := range extra {
			out[k] = v
		}
		b, _ := json.Marshal(out)
		fmt.Println(string(b))
		return
	}
	fmt.Printf("%s %s: %d workers, %d locks, %d clients, %.1f s\n", impl, cfg.mode, cfg.workers, cfg.locks, cfg.clients, elapsed)
	fmt.Printf("  acquisitions      %d (%.0f/s, %d attempts)\n", st.acquisitions, opsPerS, st.attempts)
	fmt.Printf("  wait ms           p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", ms(st.wait.quantile(0.5)),
		ms(st.wait.quantile(0.9)), ms(st.wait.quantile(0.99)), ms(float64(st.wait.max)))
	fmt.Printf("  longest idle      %.2f ms (a name free between two holders)\n", float64(atomic.LoadInt64(&st.maxIdleUs))/1000)
	fmt.Printf("  client CPU        %.3f s per 1000 acquisitions\n", cpuPer1000)
	fmt.Printf("  peak RSS          %.1f MB\n", peakRSSMB())
	if rpcs >= 0 {
		fmt.Printf("  RPCs/acquisition  %.2f (Txn %.2f, Range %.2f, DeleteRange %.2f, Watch msgs %.2f)\n", rpcs,
			perAcq("Txn"), perAcq("Range"), perAcq("DeleteRange"), perAcq("Watch"))
	}
	for k, v := range extra {
		fmt.Printf("  %-17s %v\n", k, v)
	}
	fmt.Printf("  violations        %d\n  errors            %d %s\n  keys left         %d\n", st.violations,
		st.errs, firstError, leftover)
}

func kvKey(cfg config, i int) string { return cfg.prefix + "kv/" + strconv.Itoa(i) }

func max64(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}
