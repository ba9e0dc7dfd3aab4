// rwlock: readers or writers of etcd's Go recipe.RWMutex (contrib/recipes, from Debian's
// golang-etcd-server-dev, built in GOPATH mode), for test_rw_mutex_interop. Each hold is
// checked in etcd itself, by the same atomic txns the coetcd side runs (see test_rw_mutex_interop.cpp):
// a writer enters only if no writer and no reader marker exists; a reader enters only if no
// writer marker exists, and counts an overlap when another reader's marker is there (and a
// cross overlap when that reader is not one of these helpers: its value lacks the "go-" prefix).
// Prints "holds H violations V overlaps O cross C" and exits 0, or prints the error and exits 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
	recipe "go.etcd.io/etcd/contrib/recipes"
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	name := flag.String("name", "rw", "lock name")
	role := flag.String("role", "read", "read or write")
	rounds := flag.Int("rounds", 20, "holds to take")
	hold := flag.Duration("hold", 5*time.Millisecond, "time inside each hold")
	id := flag.String("id", "go", "marker id")
	flag.Parse()

	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*endpoints, ","), DialTimeout: 5 * time.Second})
	if err != nil {
		fail(err)
	}
	defer cli.Close()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		fail(err)
	}
	defer s.Close()
	m := recipe.NewRWMutex(s, *name)
	ctx := context.Background()
	writer := *name + "-check/writer"
	readers := *name + "-check/reader/"
	mine := readers + *id
	holds, violations, overlaps, cross := 0, 0, 0, 0
	for i := 0; i < *rounds; i++ {
		if *role == "write" {
			if err := m.Lock(); err != nil {
				fail(err)
			}
			r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(writer), "=", 0),
				clientv3.Compare(clientv3.Version(readers).WithPrefix(), "=", 0)).
				Then(clientv3.OpPut(writer, *id)).Commit()
			if err != nil {
				fail(err)
			}
			if !r.Succeeded {
				violations++
			}
			time.Sleep(*hold)
			if r.Succeeded {
				if _, err := cli.Delete(ctx, writer); err != nil {
					fail(err)
				}
			}
			if err := m.Unlock(); err != nil {
				fail(err)
			}
		} else {
			if err := m.RLock(); err != nil {
				fail(err)
			}
			r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(writer), "=", 0)).
				Then(clientv3.OpPut(mine, *id), clientv3.OpGet(readers, clientv3.WithPrefix())).
				Commit()
			if err != nil {
				fail(err)
			}
			if !r.Succeeded {
				violations++
			} else {
				kvs := r.Responses[1].GetResponseRange().Kvs
				if len(kvs) > 1 {
					overlaps++
				}
				for _, kv := range kvs {
					if !strings.HasPrefix(string(kv.Value), "go-") {
						cross++
						break
					}
				}
			}
			time.Sleep(*hold)
			if r.Succeeded {
				if _, err := cli.Delete(ctx, mine); err != nil {
					fail(err)
				}
			}
			if err := m.RUnlock(); err != nil {
				fail(err)
			}
		}
		holds++
	}
	fmt.Printf("holds %d violations %d overlaps %d cross %d\n", holds, violations, overlaps, cross)
}
