// Command sqlfence shows how a SQL row refuses a writer whose distlock lease
// ran out: the row stores the highest fence that wrote it, and every write
// under the lock is
//
//	UPDATE accounts SET balance = $3, fence = $1 WHERE id = $2 AND fence <= $1
//
// with $1 the writer's Lock.Fence(). A holder that was paused past its lease
// (GC pause, VM stall) carries a smaller fence than the holder that came
// after it, so its UPDATE matches 0 rows: it learns it is stale and nothing
// is overwritten.
//
// It runs the same story twice, without and with the fence condition, on an
// SQLite file (pure Go driver, no server) and a Redis server: the one given
// with -redis, or else a throwaway redis-server it starts itself.
//
//	go run .                       # from examples/sqlfence
//	go run . -redis localhost:6379
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"
)

func main() {
	addr := flag.String("redis", "", "Redis address; empty starts a throwaway redis-server")
	flag.Parse()
	if err := run(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "sqlfence:", err)
		os.Exit(1)
	}
}

func run(addr string) error {
	dir, err := os.MkdirTemp("", "sqlfence")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if addr == "" {
		srv, err := redistest.Launch(dir)
		if err != nil {
			return err
		}
		defer srv.Kill()
		addr = srv.Addr
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locks := distlock.New(rdb)
	defer locks.Close()

	db, err := sql.Open("sqlite", filepath.Join(dir, "bank.db"))
	if err != nil {
		return err
	}
	defer db.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, fenced := range []bool{false, true} {
		res, err := story(ctx, locks, db, fenced)
		if err != nil {
			return err
		}
		fmt.Println(res)
	}
	return nil
}

// Result is what one run of the story ends with.
type Result struct {
	Fenced       bool
	Balance      int   // final balance: 100 - 50 (B) - 30 (A) = 20 if both debits counted
	StaleRows    int64 // rows the paused holder's UPDATE changed
	StaleFence   int64
	CurrentFence int64
	CurrentRows  int64 // rows the current holder's UPDATE changed
}

func (r Result) String() string {
	mode := "without fence check"
	if r.Fenced {
		mode = "with fence check   "
	}
	verdict := "B's debit of 50 is lost: the paused holder overwrote it"
	if r.StaleRows == 0 {
		verdict = "the paused holder is refused (0 rows) and can retry under a new lock"
	}
	return fmt.Sprintf("%s  balance %3d  stale write (fence %d, after fence %d wrote) changed %d row(s): %s",
		mode, r.Balance, r.StaleFence, r.CurrentFence, r.StaleRows, verdict)
}

// story: worker A takes the lock and reads the balance, then stalls past its
// lease; worker B takes the lock, debits 50 and releases; A wakes up and
// debits 30 from the balance it read before the stall.
func story(ctx context.Context, locks *distlock.Client, db *sql.DB, fenced bool) (Result, error) {
	res := Result{Fenced: fenced}
	if err := reset(ctx, db); err != nil {
		return res, err
	}
	key := fmt.Sprintf("account:7:%v", fenced)

	// A's lease is short and not renewed: that is what a paused process
	// looks like from Redis, which hears nothing from it.
	a, err := locks.Lock(ctx, key, distlock.WithTTL(200*time.Millisecond), distlock.WithoutRenewal())
	if err != nil {
		return res, err
	}
	res.StaleFence = a.Fence()
	readA, err := balance(ctx, db)
	if err != nil {
		return res, err
	}
	// A stalls here. Its lease runs out and B, waiting in Lock, gets in.

	b, err := locks.Lock(ctx, key)
	if err != nil {
		return res, err
	}
	res.CurrentFence = b.Fence()
	readB, err := balance(ctx, db)
	if err != nil {
		return res, err
	}
	if res.CurrentRows, err = debit(ctx, db, fenced, b.Fence(), readB-50); err != nil {
		return res, err
	}
	if err := b.Release(ctx); err != nil {
		return res, err
	}

	// A resumes, unaware of the stall, and writes what it computed. Its
	// Release then says what its UPDATE already knew.
	if res.StaleRows, err = debit(ctx, db, fenced, a.Fence(), readA-30); err != nil {
		return res, err
	}
	if err := a.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		return res, fmt.Errorf("stale Release: %v, want ErrNotHeld", err)
	}
	res.Balance, err = balance(ctx, db)
	return res, err
}

// debit writes the new balance. With fenced, the row accepts the write only
// if fence is at least the highest fence that wrote it, and records fence.
func debit(ctx context.Context, db *sql.DB, fenced bool, fence int64, newBalance int) (int64, error) {
	var r sql.Result
	var err error
	if fenced {
		r, err = db.ExecContext(ctx,
			`UPDATE accounts SET balance = $3, fence = $1 WHERE id = $2 AND fence <= $1`,
			fence, 7, newBalance)
	} else {
		r, err = db.ExecContext(ctx, `UPDATE accounts SET balance = $2 WHERE id = $1`, 7, newBalance)
	}
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

func reset(ctx context.Context, db *sql.DB) error {
	_, err := db.ExecContext(ctx, `
		CREATE TABLE IF NOT EXISTS accounts (
			id      INTEGER PRIMARY KEY,
			balance INTEGER NOT NULL,
			fence   INTEGER NOT NULL DEFAULT 0 -- highest fence that wrote the row
		);
		INSERT OR REPLACE INTO accounts (id, balance, fence) VALUES (7, 100, 0);`)
	return err
}

func balance(ctx context.Context, db *sql.DB) (int, error) {
	var b int
	err := db.QueryRowContext(ctx, `SELECT balance FROM accounts WHERE id = 7`).Scan(&b)
	return b, err
}
