package distlock

// checkPrimitive is what every primitive's constructor checks: a usable
// Client, a valid name, and a backend that serves kind k.
func (c *Client) checkPrimitive(k *kind, name string) error {
	if err := c.usable(); err != nil {
		return err
	}
	if err := c.checkName(k, name); err != nil {
		return err
	}
	return c.b.serves(k, nil)
}

// checkName validates name as the name of a hold of kind k on c
// (validateKey, and checkTag on a Cluster), without building the rest of a
// request.
func (c *Client) checkName(k *kind, name string) error {
	if err := validateKey(name); err != nil {
		return err
	}
	return c.checkTag(name, c.prefix+k.prefix+"{"+name+"}")
}
