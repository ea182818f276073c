package main

import "github.com/distlock/distlock"

func init() { fairOption = distlock.WithFair }
