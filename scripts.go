package distlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// Each script is one atomic Redis call; go-redis runs it with EVALSHA and
// falls back to EVAL on NOSCRIPT, so the fast path is one round trip.
var (
	//go:embed lua/acquire.lua
	acquireSource string
	//go:embed lua/release.lua
	releaseSource string
	//go:embed lua/extend.lua
	extendSource string
	//go:embed lua/pttl.lua
	pttlSource string
	//go:embed lua/acquire_fair.lua
	acquireFairSource string
	//go:embed lua/leave.lua
	leaveSource string
	// handoffSource defines the functions that hand a freed lock to the next
	// waiter in line; the scripts that free a lock start with it.
	//go:embed lua/handoff.lua
	handoffSource string

	acquireScript     = redis.NewScript(acquireSource)
	releaseScript     = redis.NewScript(handoffSource + releaseSource)
	acquireFairScript = redis.NewScript(handoffSource + acquireFairSource)
	leaveScript       = redis.NewScript(handoffSource + leaveSource)
	extendScript      = redis.NewScript(extendSource)
	pttlScript        = redis.NewScript(pttlSource)
)
