// recipes: etcd's Go contrib/recipes Queue, PriorityQueue, Barrier and DoubleBarrier (Debian's
// golang-etcd-server-dev, built in GOPATH mode), for test_queue's interop cases. One step per
// run, printed line by line:
//   queue-put NAME N        enqueues go-0..go-N-1, prints "put N"
//   queue-take NAME N       dequeues N items, prints each value
//   pq-put NAME N           enqueues go-0..go-N-1 at priority i%3, prints "put N"
//   pq-take NAME N          dequeues N items, prints each value
//   barrier-wait NAME       prints "released" once the barrier is released
//   barrier-hold NAME       holds the barrier, prints "held"
//   double NAME COUNT HOLD  enters, prints "entered", waits HOLD, leaves, prints "left"
// Exits 0, or prints "error: ..." and exits 1.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
	recipe "go.etcd.io/etcd/contrib/recipes"
)

func main() {
	eps := flag.String("endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	flag.Parse()
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	args := flag.Args()
	if len(args) < 2 {
		fail(fmt.Errorf("usage: recipes [-endpoints E] STEP NAME [ARGS]"))
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*eps, ","), DialTimeout: 5 * time.Second})
	if err != nil {
		fail(err)
	}
	defer cli.Close()
	number := func(i int) int {
		if len(args) <= i {
			fail(fmt.Errorf("%s needs %d arguments", args[0], i))
		}
		n, err := strconv.Atoi(args[i])
		if err != nil {
			fail(err)
		}
		return n
	}
	step, name := args[0], args[1]
	switch step {
	case "queue-put", "pq-put":
		n := number(2)
		q, pq := recipe.NewQueue(cli, name), recipe.NewPriorityQueue(cli, name)
		for i := 0; i < n; i++ {
			v := fmt.Sprintf("go-%d", i)
			if step == "queue-put" {
				err = q.Enqueue(v)
			} else {
				err = pq.Enqueue(v, uint16(i%3))
			}
			if err != nil {
				fail(err)
			}
		}
		fmt.Println("put", n)
	case "queue-take", "pq-take":
		n := number(2)
		q, pq := recipe.NewQueue(cli, name), recipe.NewPriorityQueue(cli, name)
		for i := 0; i < n; i++ {
			var v string
			if step == "queue-take" {
				v, err = q.Dequeue()
			} else {
				v, err = pq.Dequeue()
			}
			if err != nil {
				fail(err)
			}
			fmt.Println(v)
		}
	case "barrier-wait":
		if err := recipe.NewBarrier(cli, name).Wait(); err != nil {
			fail(err)
		}
		fmt.Println("released")
	case "barrier-hold":
		if err := recipe.NewBarrier(cli, name).Hold(); err != nil {
			fail(err)
		}
		fmt.Println("held")
	case "double":
		count := number(2)
		hold, err := time.ParseDuration(args[3])
		if err != nil {
			fail(err)
		}
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
		if err != nil {
			fail(err)
		}
		defer s.Close()
		b := recipe.NewDoubleBarrier(s, name, count)
		if err := b.Enter(); err != nil {
			fail(err)
		}
		fmt.Println("entered")
		time.Sleep(hold)
		if err := b.Leave(); err != nil {
			fail(err)
		}
		fmt.Println("left")
	default:
		fail(fmt.Errorf("unknown step %s", step))
	}
}
