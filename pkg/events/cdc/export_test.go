package cdc

import "context"

// SetBeforeResync makes c run f between a resync's new slot and its read
// of the rows (a change there must come once, in the stream).
func SetBeforeResync(c *Connector, f func(context.Context)) { c.beforeResync = f }
