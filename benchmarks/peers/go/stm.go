package main

// --mode stm: --workers goroutines on one client increment --locks counters (worker i uses
// counter i % locks) with concurrency.NewSTM at its default isolation (SerializableSnapshot),
// as coetcd's stm_bench does with coetcd::stm. "acquisitions" are commits; at the end the
// counters' sum must equal them ("lost_updates" says by how much it does not), and
// "runs_per_commit" is how often the body ran per commit (conflicts run it again).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
)

func runSTM(cfg config) int {
	c, err := clientv3.New(clientv3.Config{Endpoints: cfg.endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintf(os.Stderr, "go-bench: client: %v\n", err)
		return 1
	}
	defer c.Close()
	ctx := context.Background()
	key := func(i int) string { return cfg.prefix + "counter-" + strconv.Itoa(i%cfg.locks) }
	if _, err := c.Delete(ctx, cfg.prefix, clientv3.WithPrefix()); err != nil {
		fmt.Fprintf(os.Stderr, "go-bench: delete: %v\n", err)
		return 1
	}
	var commits, runs, errs int64
	var firstError atomic.Value
	firstError.Store("")
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(cfg.duration)
	for w := 0; w < cfg.workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			k := key(w)
			for time.Now().Before(deadline) {
				_, err := concurrency.NewSTM(c, func(s concurrency.STM) error {
					atomic.AddInt64(&runs, 1)
					n, _ := strconv.ParseInt(s.Get(k), 10, 64)
					s.Put(k, strconv.FormatInt(n+1, 10))
					return nil
				})
				if err != nil {
					atomic.AddInt64(&errs, 1)
					firstError.CompareAndSwap("", err.Error())
					return
				}
				atomic.AddInt64(&commits, 1)
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	var sum int64
	for i := 0; i < cfg.locks; i++ {
		r, err := c.Get(ctx, key(i))
		if err != nil {
			fmt.Fprintf(os.Stderr, "go-bench: get: %v\n", err)
			return 1
		}
		if len(r.Kvs) == 1 {
			n, _ := strconv.ParseInt(string(r.Kvs[0].Value), 10, 64)
			sum += n
		}
	}
	c.Delete(ctx, cfg.prefix, clientv3.WithPrefix())
	out := map[string]interface{}{
		"impl": "go", "mode": "stm", "workers": cfg.workers, "locks": cfg.locks, "clients": 1,
		"seconds": elapsed, "acquisitions": commits, "acquisitions_per_s": float64(commits) / elapsed,
		"runs_per_commit": float64(runs) / float64(maxInt64(commits, 1)), "lost_updates": commits - sum,
		"errors": errs, "first_error": firstError.Load().(string), "violations": 0,
	}
	if cfg.json {
		b, _ := json.Marshal(out)
		fmt.Println(string(b))
	} else {
		fmt.Printf("go stm: %d commits in %.1f s (%.0f/s), %.2f runs per commit, lost %d\n", commits, elapsed,
			float64(commits)/elapsed, float64(runs)/float64(maxInt64(commits, 1)), commits-sum)
	}
	if errs > 0 || commits != sum {
		return 1
	}
	return 0
}

func maxInt64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
