package distlock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// List(pattern) returns exactly the held names that Redis itself matches
// with pattern (KEYS on the bare names in another database), for names and
// patterns made of glob metacharacters and braces.
func TestListMatchesAsRedisDoes(t *testing.T) {
	c, rdb, srv := setup(t)
	ctx := ctxT(t, 2*time.Minute)
	opts := srv.Options()
	opts.DB = 1
	bare := redis.NewClient(opts)
	defer bare.Close()
	seed, _ := strconv.ParseUint(os.Getenv("GLOBSEED"), 10, 64)
	rng := rand.New(rand.NewPCG(seed, 2))
	const alphabet = `ab{}*?[]\^-:`
	gen := func(max int) string {
		n := 1 + rng.IntN(max)
		var b strings.Builder
		for range n {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	names := map[string]bool{}
	for len(names) < 80 {
		n := gen(5)
		if names[n] {
			continue
		}
		names[n] = true
		if _, err := c.TryLock(ctx, n, distlock.WithoutRenewal(), distlock.WithTTL(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if err := bare.Set(ctx, n, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	_ = rdb
	bad, total := 0, 0
	defer func() { t.Logf("%d names listed in all", total) }()
	for range 1500 {
		p := gen(6)
		want, err := bare.Keys(ctx, p).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(want)
		infos, err := c.List(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, in := range infos {
			got = append(got, in.Key)
		}
		total += len(got)
		if !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, Redis matches %q", p, got, want)
			if bad++; bad > 10 {
				t.FailNow()
			}
		}
	}
}

// List and Inspect on a Cluster return by their deadline when one master
// hangs, with either go-redis timeout setting.
func TestClusterListReturnsByDeadlineWhenAMasterHangs(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	for _, timeouts := range []bool{false, true} {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{cl.Nodes[0].Addr}, ContextTimeoutEnabled: timeouts, DialTimeout: time.Second})
		defer cc.Close()
		c := distlock.New(cc)
		defer c.Close()
		ctx := ctxT(t, 10*time.Second)
		if _, err := c.TryLock(ctx, "k", distlock.WithoutRenewal()); err != nil && !errors.Is(err, distlock.ErrNotObtained) {
			t.Fatal(err)
		}
		if _, err := c.List(ctx, "*"); err != nil {
			t.Fatal(err)
		}
		m := cl.MasterOf(t, "distlock:{k}")
		m.Signal(syscall.SIGSTOP)
		for _, deadline := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond} {
			for name, f := range map[string]func(context.Context) error{
				"List":    func(ctx context.Context) error { _, err := c.List(ctx, "*"); return err },
				"Inspect": func(ctx context.Context) error { _, err := c.Inspect(ctx, "k"); return err },
			} {
				dctx, cancel := context.WithTimeout(context.Background(), deadline)
				took, err := timedCall(deadline+2*time.Second, func() error { return f(dctx) })
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) || took > deadline+deadlineSlack {
					t.Errorf("timeouts=%v %s under %v with a master frozen: %v after %v", timeouts, name, deadline, err, took.Round(time.Millisecond))
				}
			}
		}
		m.Signal(syscall.SIGCONT)
	}
}
