package envelope

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Change is a whole change event, both rows decoded into maps (the values
// encoding/json gives): for readers that compare rows, such as the chaos
// checker. The audit-consumer's hot path uses Parse instead.
type Change struct {
	Before map[string]any `json:"before"`
	After  map[string]any `json:"after"`
	Op     string         `json:"op"`
	Source struct {
		Table string `json:"table"`
		LSN   int64  `json:"lsn"`
		TsMs  int64  `json:"ts_ms"`
	} `json:"source"`
}

// DecodeChange decodes a whole change event, in either form (schemaless,
// or {"schema":...,"payload":<event>}).
func DecodeChange(b []byte) (Change, error) {
	var f struct {
		Change
		Payload *Change `json:"payload"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return Change{}, fmt.Errorf("decode change event: %w", err)
	}
	if f.Payload != nil {
		return *f.Payload, nil
	}
	return f.Change, nil
}

// SourceTsMs finds an event's commit time (source.ts_ms) without decoding
// the whole envelope: for watchers that must not load the machine they
// measure. It relies on the encoder's field order (AppendValue writes
// source after both rows, and ts_ms first in it).
func SourceTsMs(v []byte) (int64, bool) {
	i := bytes.LastIndex(v, []byte(`"source":{`))
	if i < 0 {
		return 0, false
	}
	j := bytes.Index(v[i:], []byte(`"ts_ms":`))
	if j < 0 {
		return 0, false
	}
	rest := v[i+j+len(`"ts_ms":`):]
	k := bytes.IndexAny(rest, ",}")
	if k < 0 {
		return 0, false
	}
	ms, err := strconv.ParseInt(string(rest[:k]), 10, 64)
	return ms, err == nil
}
