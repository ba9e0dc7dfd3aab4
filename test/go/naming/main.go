// naming: etcd's Go naming/endpoints Manager (Debian's golang-etcd-server-dev, built in GOPATH
// mode), for test_naming's interop cases. "list TARGET" prints each endpoint the Manager sees as
// "KEY ADDR METADATA" (metadata as Go marshals it again); "add KEY ADDR METADATA-JSON" adds one
// endpoint under a lease of 10 s, prints "added", keeps the lease alive for -hold, then revokes it.
// Exits 0, or prints the error and exits 1.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/naming/endpoints"
)

func main() {
	eps := flag.String("endpoints", "127.0.0.1:2379", "comma-separated etcd endpoints")
	hold := flag.Duration("hold", 3*time.Second, "how long an added endpoint stays")
	flag.Parse()
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*eps, ","), DialTimeout: 5 * time.Second})
	if err != nil {
		fail(err)
	}
	defer cli.Close()
	ctx := context.Background()
	args := flag.Args()
	switch {
	case len(args) == 2 && args[0] == "list":
		m, err := endpoints.NewManager(cli, args[1])
		if err != nil {
			fail(err)
		}
		all, err := m.List(ctx)
		if err != nil {
			fail(err)
		}
		keys := make([]string, 0, len(all))
		for k := range all {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			md, _ := json.Marshal(all[k].Metadata)
			fmt.Printf("%s %s %s\n", k, all[k].Addr, md)
		}
	case len(args) == 4 && args[0] == "add":
		target := args[1][:strings.LastIndex(args[1], "/")]
		m, err := endpoints.NewManager(cli, target)
		if err != nil {
			fail(err)
		}
		var md interface{}
		if err := json.Unmarshal([]byte(args[3]), &md); err != nil {
			fail(err)
		}
		lease, err := cli.Grant(ctx, 10)
		if err != nil {
			fail(err)
		}
		if err := m.AddEndpoint(ctx, args[1], endpoints.Endpoint{Addr: args[2], Metadata: md}, clientv3.WithLease(lease.ID)); err != nil {
			fail(err)
		}
		keep, err := cli.KeepAlive(ctx, lease.ID)
		if err != nil {
			fail(err)
		}
		go func() {
			for range keep {
			}
		}()
		fmt.Println("added")
		time.Sleep(*hold)
		cli.Revoke(ctx, lease.ID)
	default:
		fail(fmt.Errorf("usage: naming [-endpoints E] list TARGET | add KEY ADDR METADATA-JSON"))
	}
}
