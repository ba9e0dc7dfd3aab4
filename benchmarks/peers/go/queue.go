package main

// --mode queue: --workers producer goroutines and as many consumers on one client share one
// contrib/recipes Queue, as coetcd's queue_bench does with coetcd::queue. Producers enqueue
// until --duration passes, consumers dequeue all along. "acquisitions" are the items taken while
// the producers ran (the rate: over --duration); then the consumers drain the queue for up to 20 s
// more: "left" counts items put and not taken by then (still in etcd: not lost, only slow), and
// "duplicated" items taken twice.

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/clientv3"
	recipe "go.etcd.io/etcd/contrib/recipes"
)

func runQueue(cfg config) int {
	c, err := clientv3.New(clientv3.Config{Endpoints: cfg.endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintf(os.Stderr, "go-bench: client: %v\n", err)
		return 1
	}
	// No Close: consumers blocked in Dequeue when all is taken would see their watch closed and
	// fail (Go's Dequeue then dereferences a nil event); the process exits under them instead.
	q := recipe.NewQueue(c, cfg.prefix+"q")
	var put, taken, errs int64
	var firstError atomic.Value
	firstError.Store("")
	fail := func(err error) {
		atomic.AddInt64(&errs, 1)
		firstError.CompareAndSwap("", err.Error())
	}
	var mu sync.Mutex
	seen := map[string]int{}
	start := time.Now()
	deadline := start.Add(cfg.duration)
	var producers sync.WaitGroup
	for w := 0; w < cfg.workers; w++ {
		producers.Add(1)
		go func(w int) {
			defer producers.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				if err := q.Enqueue(fmt.Sprintf("p%d-%d", w, i)); err != nil {
					fail(err)
					return
				}
				atomic.AddInt64(&put, 1)
			}
		}(w)
	}
	for w := 0; w < cfg.workers; w++ {
		go func() {
			for {
				v, err := q.Dequeue()
				if err != nil {
					fail(err)
					return
				}
				mu.Lock()
				seen[v]++
				mu.Unlock()
				atomic.AddInt64(&taken, 1)
			}
		}()
	}
	time.Sleep(time.Until(deadline))
	inWindow := atomic.LoadInt64(&taken)
	elapsed := time.Since(start).Seconds()
	producers.Wait()
	// Consumers still blocked in Dequeue when all is taken stay so: the process ends under them.
	for limit := time.Now().Add(20 * time.Second); atomic.LoadInt64(&taken) < atomic.LoadInt64(&put) && time.Now().Before(limit); {
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	duplicated := 0
	for _, n := range seen {
		if n > 1 {
			duplicated += n - 1
		}
	}
	left := atomic.LoadInt64(&put) - int64(len(seen))
	mu.Unlock()
	n := inWindow
	out := map[string]interface{}{
		"impl": "go", "mode": "queue", "workers": cfg.workers, "locks": 1, "clients": 1,
		"seconds": elapsed, "acquisitions": n, "acquisitions_per_s": float64(n) / elapsed, "put": atomic.LoadInt64(&put),
		"left": left, "duplicated": duplicated, "errors": atomic.LoadInt64(&errs),
		"first_error": firstError.Load().(string), "violations": duplicated,
	}
	if cfg.json {
		b, _ := json.Marshal(out)
		fmt.Println(string(b))
	} else {
		fmt.Printf("go queue: %d items taken in %.1f s (%.0f/s), left %d, duplicated %d, errors %d %s\n", n, elapsed,
			float64(n)/elapsed, left, duplicated, atomic.LoadInt64(&errs), firstError.Load().(string))
	}
	if errs > 0 || duplicated != 0 {
		return 1
	}
	return 0
}
