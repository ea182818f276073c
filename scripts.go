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

	acquireScript = redis.NewScript(acquireSource)
	releaseScript = redis.NewScript(releaseSource)
	extendScript  = redis.NewScript(extendSource)
	pttlScript    = redis.NewScript(pttlSource)
)
