package distlock

import (
	"strconv"
	"strings"
	"sync"
)

// keyNames are the Redis names of one lock. Every name but fence carries
// the lock's hash tag, so they share one Cluster slot and one script can
// touch them all; fence is the counter of the node (or, on a Cluster, of
// the lock's slot), which lands in the same slot by construction.
type keyNames struct {
	lock  string // string: the grant (see lua/lib.lua), with the lease as TTL
	fence string // counter shared by every lock of the node or slot
	line  string // list: waiters in arrival order
	// keys are the KEYS of the acquire and release scripts: lock, fence,
	// line; keys[:1] those of extend and pttl. Built once per call.
	keys []string
	// counted: the Client's own variants of the scripts that draw from
	// fence (nil: the scripts as they are)
	counted *counterScripts
}

const lineSuffix = ":line"

// newKeyNames builds the names from the line's key: the lock's key is its
// prefix, so both share one string.
func newKeyNames(line string, counter func(lockKey string) string) keyNames {
	lock := line[:len(line)-len(lineSuffix)]
	k := keyNames{lock: lock, fence: counter(lock), line: line}
	k.keys = make([]string, 3, 5) // room for the two keys of a shared kind
	k.keys[0], k.keys[1], k.keys[2] = k.lock, k.fence, k.line
	return k
}

// channel is where "r" is published when the lock is freed without a
// handoff (quorum waiters listen there).
func (k keyNames) channel() string { return k.lock + ":released" }

// inbox is where handoffs to the waiters of the Client with id are
// published.
func (k keyNames) inbox(clientID string) string { return k.lock + ":to:" + clientID }

// nodeCounter is the fence counter of a standalone or Sentinel-managed
// server: one key per node, so that fences cost no key per lock name.
func nodeCounter(prefix string) func(string) string {
	name := prefix + "fence"
	return func(string) string { return name }
}

// slotCounter is the fence counter on a Cluster: one key per slot, named
// with a hash tag chosen to hash to the lock key's own slot, so that the
// acquire script may touch it and it moves with the slot when the slot
// migrates or fails over.
func slotCounter(prefix string) func(string) string {
	return func(lockKey string) string {
		return prefix + slotCounterPart + "{" + slotTag(keySlot(lockKey)) + "}"
	}
}

// slotCounterPart is what a slot's fence counter puts between the prefix
// and its hash tag. A lock key is the prefix and the name in braces, so a
// Cluster Client whose prefix ends with it would name a lock (say "0") as
// the slot counter of the prefix without it ("app:fence:{0}" of "app:"),
// and either Client would find the other's key in the way.
const slotCounterPart = "fence:"

// keySlot is Redis Cluster's slot of key: CRC16 of its hash tag (the text
// between the first '{' and the next '}', if not empty) or of the whole key.
func keySlot(key string) int {
	return int(crc16(hashTag(key)) % 16384)
}

// clusterPrefix reports whether prefix keeps every key of a lock in one
// Cluster slot. Without a '{' the name's braces make the tag; with one, the
// prefix's own first tag must be whole and non-empty, so that it is the tag
// of every key (the lock's, its line's, its slot's fence counter's). A
// prefix like "app{" would make the tag of a lock "{name" and that of its
// counter "fence:{17": two slots, CROSSSLOT on every acquire.
func clusterPrefix(prefix string) bool {
	return !strings.Contains(prefix, "{") || hashTag(prefix) != prefix
}

// hashTag returns what Redis Cluster hashes for key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

var (
	slotTagsOnce sync.Once
	slotTags     [16384]string
)

// slotTag returns a short hash tag whose slot is slot: the first of "0",
// "1", … (base 36) that hashes there. The table is built once, on first use
// by a Cluster Client (about 170,000 CRCs).
func slotTag(slot int) string {
	slotTagsOnce.Do(func() {
		left := len(slotTags)
		for i := 0; left > 0; i++ {
			tag := strconv.FormatInt(int64(i), 36)
			if s := crc16(tag) % 16384; slotTags[s] == "" {
				slotTags[s] = tag
				left--
			}
		}
	})
	return slotTags[slot]
}

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster uses for key slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
