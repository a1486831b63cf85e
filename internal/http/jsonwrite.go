package http

import (
	"maps"
	"slices"
	"strconv"
)

// jsonAppender is an answer that writes its own JSON, as encodeJSON would
// write it, on every acquire's and release's path: encoding/json walks the
// struct by reflection each time. ok is false when a value needs what
// appendPlain does not do (an escape); the caller then encodes it with
// encodeJSON. TestAppendJSON holds the two to the same bytes.
type jsonAppender interface {
	appendJSON(b []byte) (_ []byte, ok bool)
}

func (l Lease) appendJSON(b []byte) ([]byte, bool) {
	ok := true
	str := func(name, v string) {
		b = append(b, name...)
		b, ok = appendPlain(b, v, ok)
	}
	str(`{"lock":`, l.Lock)
	str(`,"lease_id":`, l.LeaseID)
	str(`,"owner":`, l.Owner)
	str(`,"mode":`, string(l.Mode))
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, int64(l.Limit), 10)
	b = append(b, `,"fencing_token":`...)
	b = strconv.AppendUint(b, l.FencingToken, 10)
	b = append(b, `,"hold_count":`...)
	b = strconv.AppendInt(b, int64(l.HoldCount), 10)
	b = append(b, `,"ttl_ms":`...)
	b = strconv.AppendInt(b, l.TTLMs, 10)
	str(`,"acquired_at":`, l.AcquiredAt)
	str(`,"expires_at":`, l.ExpiresAt)
	b = append(b, `,"metadata":`...)
	if l.Metadata == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		// encoding/json writes a map's members in the order of their names.
		for i, k := range slices.Sorted(maps.Keys(l.Metadata)) {
			if i > 0 {
				b = append(b, ',')
			}
			b, ok = appendPlain(b, k, ok)
			b = append(b, ':')
			b, ok = appendPlain(b, l.Metadata[k], ok)
		}
		b = append(b, '}')
	}
	str(`,"release_url":`, l.ReleaseURL)
	if l.Session != "" {
		str(`,"session":`, l.Session)
	}
	return append(b, "}\n"...), ok
}

func (r ReleaseResult) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"lock":`...)
	b, ok := appendPlain(b, r.Lock, true)
	b = append(b, `,"lease_id":`...)
	b, ok = appendPlain(b, r.LeaseID, ok)
	b = append(b, `,"hold_count":`...)
	b = strconv.AppendInt(b, int64(r.HoldCount), 10)
	b = append(b, `,"released":`...)
	b = strconv.AppendBool(b, r.Released)
	return append(b, "}\n"...), ok
}

// appendPlain appends s as a JSON string when no byte of it needs an escape
// (printable ASCII other than '"' and '\\': encodeJSON does not escape
// HTML), and reports false otherwise, or when ok was false already.
func appendPlain(b []byte, s string, ok bool) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return b, false
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), ok
}
