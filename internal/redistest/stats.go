package redistest

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerMicros returns the microseconds the server spent executing the
// named commands since its stats were last reset (CONFIG RESETSTAT), from
// INFO commandstats; a script's time includes the commands it calls.
func ServerMicros(t testing.TB, rdb *redis.Client, names ...string) float64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		name, fields, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !contains(names, name) {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("commandstats %q: %v", line, err)
				}
				total += n
			}
		}
	}
	return total
}

// ReportServerMicros resets the server's command stats now, and the
// function it returns reports the time the server spent in the named
// commands per op as the metric server-µs/op, and the benchmark process's
// CPU time (user + system, every goroutine's) per op as client-cpu-µs/op:
// defer it.
func ReportServerMicros(b *testing.B, rdb *redis.Client, names ...string) func() {
	b.Helper()
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	cpu0 := processCPU(b)
	return func() {
		cpu := processCPU(b) - cpu0
		b.ReportMetric(ServerMicros(b, rdb, names...)/float64(b.N), "server-µs/op")
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "client-cpu-µs/op")
	}
}

// processCPU is the user and system CPU time of this process so far.
func processCPU(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
