package recurrence

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync"
	"time"
)

// OccurrenceOf is the occurrence of p whose nominal time is nominal and
// whose index is index, read with the zone and calendar data this process
// has: a planner compares it with an occurrence made earlier, perhaps
// under other tzdata.
func (p Plan) OccurrenceOf(index int, nominal Wall) Occurrence { return p.occurrence(index, nominal) }

// rulesFrom and rulesTo bound the span whose offsets ZoneRules fingerprints:
// fixed, so the same data gives the same fingerprint whenever it is read.
var (
	rulesFrom = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	rulesTo   = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
)

// ZoneRules is a fingerprint of zone's offsets from 2000 to 2100 as this
// process reads them (its tzdata): every transition and the offset and
// abbreviation after it. Two processes with the same rules for the zone
// agree; a tzdata release that moves any of its transitions in the span,
// or an offset, changes it.
func ZoneRules(zone string) (string, error) {
	if r, ok := zoneRules.Load(zone); ok {
		return r.(string), nil
	}
	r, err := readZoneRules(zone)
	if err == nil {
		zoneRules.Store(zone, r)
	}
	return r, err
}

// zoneRules caches ZoneRules: a zone is read once per process, as
// location reads it (a host's tzdata update takes a restart).
var zoneRules sync.Map

func readZoneRules(zone string) (string, error) {
	loc, err := location(zone)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	var b []byte
	for t := rulesFrom; t.Before(rulesTo); {
		name, offset := t.In(loc).Zone()
		_, end := t.In(loc).ZoneBounds()
		b = strconv.AppendInt(b[:0], t.Unix(), 10)
		b = append(b, ' ')
		b = append(b, name...)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(offset), 10)
		b = append(b, '\n')
		h.Write(b)
		if end.IsZero() || !end.After(t) {
			break // no more transitions
		}
		t = end
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
