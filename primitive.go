package distlock

// checkPrimitive is what every primitive's constructor checks: a usable
// Client, a valid name, and a backend that serves kind k.
func (c *Client) checkPrimitive(k *kind, name string) error {
	if err := c.usable(); err != nil {
		return err
	}
	if err := validateKey(name); err != nil {
		return err
	}
	return c.b.serves(k)
}
