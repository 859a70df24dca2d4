package ca

// Subscribe returns a channel that receives the current bundle first (if a
// signer is loaded) and then every new bundle. A slow reader gets the
// latest bundle rather than each one. cancel stops delivery and closes the
// channel; it may be called more than once.
func (c *CA) Subscribe() (updates <-chan *Bundle, cancel func()) {
	return c.bundles.Subscribe(true)
}
