package envelope

import (
	"encoding/json"
)

// The schema-ful form is what Debezium's JsonConverter writes with
// schemas.enable=true: {"schema": <Kafka Connect schema>, "payload": <the
// schemaless event>}. Some sinks (the JDBC sink) need it. The schemas are
// constant per relation, so they are built once (Prepare) and the hot path
// only appends bytes.

// field is one Kafka Connect schema field, in JsonConverter's key order.
type field struct {
	Type       string            `json:"type"`
	Fields     []field           `json:"fields,omitempty"`
	Optional   bool              `json:"optional"`
	Name       string            `json:"name,omitempty"`
	Version    int               `json:"version,omitempty"`
	Parameters map[string]string `json:"parameters,omitempty"`
	Field      string            `json:"field,omitempty"`
}

// columnTypes are the schemas Debezium's PostgreSQL connector gives these
// column types with default settings.
var columnTypes = map[uint32]field{
	oidInt8:        {Type: "int64"},
	oidInt4:        {Type: "int32"},
	oidInt2:        {Type: "int16"},
	oidBool:        {Type: "boolean"},
	oidFloat8:      {Type: "double"},
	oidFloat4:      {Type: "float"},
	oidTimestamptz: {Type: "string", Name: "io.debezium.time.ZonedTimestamp", Version: 1},
	oidUUID:        {Type: "string", Name: "io.debezium.data.Uuid", Version: 1},
	oidJSON:        {Type: "string", Name: "io.debezium.data.Json", Version: 1},
	oidJSONB:       {Type: "string", Name: "io.debezium.data.Json", Version: 1},
}

// columnSchema maps a column to its schema (columnTypes). Key columns are
// required; every other column is declared optional, since pgoutput does
// not say which columns are NOT NULL (Debezium reads that from the
// catalog).
func columnSchema(c *Column) field {
	f, ok := columnTypes[c.OID]
	if !ok {
		// text, varchar, char, and timestamp without zone, which this
		// encoder writes as an ISO-8601 string (Debezium: int64
		// io.debezium.time.MicroTimestamp; no captured table has one).
		f.Type = "string"
	}
	f.Field, f.Optional = c.Name, !c.Key
	return f
}

func sourceSchema() field {
	s := func(name string, opt bool) field { return field{Type: "string", Optional: opt, Field: name} }
	i := func(name string, opt bool) field { return field{Type: "int64", Optional: opt, Field: name} }
	return field{Type: "struct", Name: "io.debezium.connector.postgresql.Source", Field: "source", Fields: []field{
		s("version", false), s("connector", false), s("name", false), i("ts_ms", false),
		{Type: "string", Optional: true, Name: "io.debezium.data.Enum", Version: 1,
			Parameters: map[string]string{"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"}, Field: "snapshot"},
		s("db", false), s("sequence", true), i("ts_us", true), i("ts_ns", true), s("schema", false), s("table", false),
		i("txId", true), i("lsn", true), i("xmin", true),
	}}
}

func transactionSchema() field {
	return field{Type: "struct", Optional: true, Name: "event.block", Version: 1, Field: "transaction", Fields: []field{
		{Type: "string", Field: "id"}, {Type: "int64", Field: "total_order"}, {Type: "int64", Field: "data_collection_order"},
	}}
}

// schemas builds the relation's key and value schemas for topic.
func (r *Relation) schemas() (key, value []byte) {
	var cols, keys []field
	for i := range r.Columns {
		c := &r.Columns[i]
		f := columnSchema(c)
		if keyColumn(r, c) {
			f.Optional = false
			keys = append(keys, f)
		}
		cols = append(cols, f)
	}
	row := func(name string) field {
		return field{Type: "struct", Fields: cols, Optional: true, Name: r.topic + ".Value", Field: name}
	}
	opt := func(name string) field { return field{Type: "int64", Optional: true, Field: name} }
	env := field{Type: "struct", Name: r.topic + ".Envelope", Version: 2, Fields: []field{
		row("before"), row("after"), sourceSchema(), transactionSchema(),
		{Type: "string", Field: "op"}, opt("ts_ms"), opt("ts_us"), opt("ts_ns"),
	}}
	k, _ := json.Marshal(field{Type: "struct", Fields: keys, Name: r.topic + ".Key"})
	v, _ := json.Marshal(env)
	return k, v
}

// AppendSchemaKey appends the record key in the schema-ful form:
// {"schema":<key schema>,"payload":<AppendKey's>}. r must be prepared.
func AppendSchemaKey(b []byte, r *Relation, t []Datum) ([]byte, error) {
	b = append(b, r.keySchemaHead...)
	b, err := AppendKey(b, r, t)
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// AppendSchemaValue appends the envelope in the schema-ful form:
// {"schema":<envelope schema>,"payload":<AppendValue's>}. r must be prepared.
func AppendSchemaValue(b []byte, r *Relation, op byte, before, after []Datum, lsn, lastCommit uint64, txid uint32, commitUs, nowNs int64) ([]byte, error) {
	b = append(b, r.valueSchemaHead...)
	b, err := AppendValue(b, r, op, before, after, lsn, lastCommit, txid, commitUs, nowNs)
	if err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}
