package main

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redistest"
)

func TestStory(t *testing.T) {
	srv := redistest.Start(t)
	locks := distlock.New(srv.Client(t))
	defer locks.Close()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "bank.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	naive, err := story(ctx, locks, db, false)
	if err != nil {
		t.Fatal(err)
	}
	if naive.StaleRows != 1 || naive.Balance != 70 {
		t.Fatalf("without the fence: %+v, want the stale write to land (balance 70)", naive)
	}
	fenced, err := story(ctx, locks, db, true)
	if err != nil {
		t.Fatal(err)
	}
	if fenced.StaleRows != 0 || fenced.CurrentRows != 1 || fenced.Balance != 50 {
		t.Fatalf("with the fence: %+v, want the stale write refused (balance 50)", fenced)
	}
	if fenced.CurrentFence <= fenced.StaleFence {
		t.Fatalf("fences %d then %d", fenced.StaleFence, fenced.CurrentFence)
	}
}
