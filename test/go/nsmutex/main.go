// nsmutex: etcd's Go concurrency.Mutex on a client whose KV, Watcher and Lease are wrapped by the
// clientv3/namespace package (from Debian's golang-etcd-server-dev, built in GOPATH mode), for
// test_namespace's interop case. Locks -name inside the namespace -ns, prints "locked KEY" (the
// key as the namespaced client sees it), holds for -hold, unlocks and prints "unlocked". Errors
// are printed and exit 1.
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
	"go.etcd.io/etcd/clientv3/namespace"
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	ns := flag.String("ns", "", "the namespace (key prefix)")
	name := flag.String("name", "lock", "lock name")
	hold := flag.Duration("hold", 100*time.Millisecond, "time to hold the lock")
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
	cli.KV = namespace.NewKV(cli.KV, *ns)
	cli.Watcher = namespace.NewWatcher(cli.Watcher, *ns)
	cli.Lease = namespace.NewLease(cli.Lease, *ns)
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		fail(err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, *name)
	ctx := context.Background()
	if err := m.Lock(ctx); err != nil {
		fail(err)
	}
	fmt.Println("locked", m.Key())
	time.Sleep(*hold)
	if err := m.Unlock(ctx); err != nil {
		fail(err)
	}
	fmt.Println("unlocked")
}
