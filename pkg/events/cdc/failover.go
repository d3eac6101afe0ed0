package cdc

import (
	"context"
	"fmt"
	"regexp"

	"github.com/jackc/pglogrepl"

	"github.com/paysched/paysched/pkg/events/cdc/cdcdb"
)

// Failover slots. On PostgreSQL 17 and later a logical slot created (or
// altered) with FAILOVER is copied to the standbys that run
// sync_replication_slots, so a promoted standby holds it at a position no
// later than what cdc confirmed, and cdc continues without a gap. Before
// 17 a slot lives on the primary alone: a failover loses it, and the gap
// check (gap.go) refuses to stream until an operator resyncs.

// failoverVersion is the first server_version_num with failover slots.
const failoverVersion = 170000

// slotNameRE is what Postgres accepts as a replication slot's name; the
// slot name is written into replication commands, which take no
// parameters.
var slotNameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// createSlotSQL is the replication command that makes the slot: with the
// option list and FAILOVER where the server has failover slots, else the
// older form every supported server accepts. Neither exports a snapshot:
// cdc streams from the slot's start and reads no snapshot.
func createSlotSQL(slot string, failover, export bool) string {
	if failover {
		snap := "nothing"
		if export {
			snap = "export"
		}
		return "CREATE_REPLICATION_SLOT " + slot + " LOGICAL pgoutput (SNAPSHOT '" + snap + "', FAILOVER true)"
	}
	if export {
		return "CREATE_REPLICATION_SLOT " + slot + " LOGICAL pgoutput EXPORT_SNAPSHOT"
	}
	return "CREATE_REPLICATION_SLOT " + slot + " LOGICAL pgoutput NOEXPORT_SNAPSHOT"
}

// alterSlotFailoverSQL turns failover on for an existing slot (a slot made
// before the server was upgraded to 17, or by an older cdc).
func alterSlotFailoverSQL(slot string) string {
	return "ALTER_REPLICATION_SLOT " + slot + " (FAILOVER true)"
}

// failoverSlots reports whether the slot should be a failover slot: asked
// for, and the server has them.
func (c *Connector) failoverSlots(ctx context.Context) (bool, error) {
	if !c.cfg.Failover {
		return false, nil
	}
	v, err := cdcdb.New(c.db).ServerVersion(ctx)
	if err != nil {
		return false, fmt.Errorf("server version: %w", err)
	}
	if v < failoverVersion {
		c.log.Info("failover slots need PostgreSQL 17: the slot lives on the primary only, and a failover is a gap cdc refuses until a resync",
			"server_version_num", v)
		return false, nil
	}
	return true, nil
}

// createSlot makes the slot and returns its consistent point. With export,
// it also returns the snapshot the slot was made at (the database as of
// that point, every later change in the slot) and release, which ends it:
// it is valid while the replication connection stays idle, so release is
// called once the snapshot has been read. Without export, release is a
// no-op and the snapshot "".
func (c *Connector) createSlot(ctx context.Context, failover, export bool) (at pglogrepl.LSN, snapshot string, release func(), err error) {
	conn, err := c.replConn(ctx)
	if err != nil {
		return 0, "", nil, err
	}
	release = func() { _ = conn.Close(context.WithoutCancel(ctx)) }
	made, err := pglogrepl.ParseCreateReplicationSlot(conn.Exec(ctx, createSlotSQL(c.cfg.Slot, failover, export)))
	if err != nil {
		release()
		return 0, "", nil, fmt.Errorf("create slot %s: %w", c.cfg.Slot, err)
	}
	at, err = pglogrepl.ParseLSN(made.ConsistentPoint)
	if err != nil {
		release()
		return 0, "", nil, fmt.Errorf("create slot %s: consistent point %q: %w", c.cfg.Slot, made.ConsistentPoint, err)
	}
	c.log.Info("created replication slot", "slot", c.cfg.Slot, "lsn", made.ConsistentPoint, "failover", failover)
	if !export {
		release()
		return at, "", func() {}, nil
	}
	return at, made.SnapshotName, release, nil
}

// ensureFailover turns failover on for an existing slot that lacks it.
// It runs before cdc streams, while no walsender holds the slot.
func (c *Connector) ensureFailover(ctx context.Context) error {
	var on bool
	if err := c.db.QueryRow(ctx, slotFailoverSQL, c.cfg.Slot).Scan(&on); err != nil {
		return fmt.Errorf("check slot failover: %w", err)
	}
	if on {
		return nil
	}
	conn, err := c.replConn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, alterSlotFailoverSQL(c.cfg.Slot)).ReadAll(); err != nil {
		return fmt.Errorf("turn failover on for slot %s: %w", c.cfg.Slot, err)
	}
	c.log.Info("replication slot is now a failover slot", "slot", c.cfg.Slot)
	return nil
}
