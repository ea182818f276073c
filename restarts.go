package distlock

// holdersChannel is the channel, under the Client's prefix, that every
// Client holding renewed locks subscribes to. Nothing is published on it.
const holdersChannel = "holders"

// watchRestarts keeps a subscription open from the Client's first grant of
// a lock that it renews on, so that the Client notices at once when a node
// restarts or its connection breaks: the listener renews every lock the
// Client holds as soon as the subscription answers again
// (subscriber.listen). Without it a holder whose Client never waited would
// learn only at its next scheduled renewal, a third of the TTL later, that
// a node restarted empty gave its lock away, or that a snapshot brought
// back a shorter lease that runs out before then. Not on a Cluster, whose
// subscriptions live on the masters of the slots that its waiters wait
// for: a holder there learns at its next renewal.
func (c *Client) watchRestarts() {
	if c.cluster {
		return
	}
	if n := c.ensureNotifier(); n != nil {
		n.keep(c.prefix + holdersChannel)
	}
}
