package kafka_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/paysched/paysched/pkg/events/kafka"
)

func TestCompression(t *testing.T) {
	for _, tc := range []struct {
		name string
		want kgo.CompressionCodec
		err  bool
	}{
		{"", kgo.NoCompression(), false},
		{"none", kgo.NoCompression(), false},
		{"gzip", kgo.GzipCompression(), false},
		{"snappy", kgo.SnappyCompression(), false},
		{"lz4", kgo.Lz4Compression(), false},
		{"zstd", kgo.ZstdCompression(), false},
		{"brotli", kgo.CompressionCodec{}, true},
		{"LZ4", kgo.CompressionCodec{}, true},
	} {
		got, err := kafka.Compression(tc.name)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("Compression(%q) = %v, %v; want %v, error %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}
