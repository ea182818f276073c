package main

import (
	"github.com/distlock/distlock"
	"github.com/redis/go-redis/v9"
)

func init() {
	newQuorum = func(rdbs []redis.UniversalClient) *distlock.Client { return distlock.NewQuorum(rdbs) }
}
