package http

import (
	"strconv"
)

// decodeFlat decodes the everyday shape of the small acquire and renew
// bodies without encoding/json: one object whose members are v's fields,
// spelled exactly, each once, holding plain values (strings without
// escapes, integers in range, booleans, and for metadata an object of such
// strings). It reports false for anything else, and v is then untouched:
// decodeBody's strict path decodes the body, and answers its errors. What
// decodeFlat accepts, the strict path accepts too, with the same result
// (FuzzDecodeFlat holds the two to it), so the fast path changes no answer,
// only what it costs. data is trimmed and valid UTF-8 (decodeBody checked).
func decodeFlat(data []byte, v any) bool {
	s := flatScanner{data: data}
	switch b := v.(type) {
	case *acquireBody:
		var out acquireBody
		if !s.object(out.member) {
			return false
		}
		*b = out
	case *renewBody:
		var out renewBody
		if !s.object(out.member) {
			return false
		}
		*b = out
	default:
		return false
	}
	return true
}

// member decodes the value of the member called name. Every field is a
// pointer or a map, nil until its member is read: one already set is a
// duplicate, which the strict path refuses.
func (b *acquireBody) member(s *flatScanner, name string) bool {
	switch name {
	case "owner":
		return s.stringPtr(&b.Owner)
	case "ttl_ms":
		return s.intPtr(&b.TTLMs)
	case "wait_ms":
		return s.intPtr(&b.WaitMs)
	case "metadata":
		return b.Metadata == nil && s.stringMap(&b.Metadata)
	case "min_replicas":
		return s.intPtr(&b.MinReplicas)
	case "mode":
		return s.stringPtr(&b.Mode)
	case "limit":
		return s.intPtr(&b.Limit)
	case "fair":
		return s.boolPtr(&b.Fair)
	case "session":
		return s.stringPtr(&b.Session)
	}
	return false
}

func (b *renewBody) member(s *flatScanner, name string) bool {
	return name == "ttl_ms" && s.intPtr(&b.TTLMs)
}

// flatScanner reads the plain JSON that decodeFlat takes; each method
// reports false on anything outside it.
type flatScanner struct {
	data []byte
	i    int
}

// object reads the whole of data as one object, calling member for each
// member with the scanner at its value, and then nothing after it.
func (s *flatScanner) object(member func(s *flatScanner, name string) bool) bool {
	if !s.members(func(name string) bool { return member(s, name) }) {
		return false
	}
	s.space()
	return s.i == len(s.data)
}

// members reads an object, calling value for each member with the scanner
// at its value.
func (s *flatScanner) members(value func(name string) bool) bool {
	s.space()
	if !s.next('{') {
		return false
	}
	s.space()
	if s.next('}') {
		return true
	}
	for {
		s.space()
		name, ok := s.str()
		if !ok {
			return false
		}
		s.space()
		if !s.next(':') {
			return false
		}
		s.space()
		if !value(name) {
			return false
		}
		s.space()
		if s.next('}') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

// space skips JSON's whitespace, and only it.
func (s *flatScanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next consumes c if it comes next.
func (s *flatScanner) next(c byte) bool {
	if s.i < len(s.data) && s.data[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string with no escape and no control character: its bytes
// are its value.
func (s *flatScanner) str() (string, bool) {
	if !s.next('"') {
		return "", false
	}
	for j := s.i; j < len(s.data); j++ {
		switch c := s.data[j]; {
		case c == '"':
			v := string(s.data[s.i:j])
			s.i = j + 1
			return v, true
		case c == '\\' || c < 0x20:
			return "", false
		}
	}
	return "", false
}

func (s *flatScanner) stringPtr(p **string) bool {
	if *p != nil {
		return false
	}
	v, ok := s.str()
	if ok {
		*p = &v
	}
	return ok
}

// intPtr reads an integer without fraction or exponent that fits an int64.
func (s *flatScanner) intPtr(p **int64) bool {
	if *p != nil {
		return false
	}
	start := s.i
	s.next('-')
	digits := s.i
	for s.i < len(s.data) && '0' <= s.data[s.i] && s.data[s.i] <= '9' {
		s.i++
	}
	switch n := s.i - digits; {
	case n == 0, n > 1 && s.data[digits] == '0': // JSON has no leading zeros
		return false
	}
	if s.i < len(s.data) {
		switch s.data[s.i] {
		case '.', 'e', 'E':
			return false
		}
	}
	v, err := strconv.ParseInt(string(s.data[start:s.i]), 10, 64)
	if err != nil {
		return false
	}
	*p = &v
	return true
}

func (s *flatScanner) boolPtr(p **bool) bool {
	if *p != nil {
		return false
	}
	var v bool
	switch rest := s.data[s.i:]; {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		v, s.i = true, s.i+4
	case len(rest) >= 5 && string(rest[:5]) == "false":
		v, s.i = false, s.i+5
	default:
		return false
	}
	*p = &v
	return true
}

// stringMap reads an object of plain strings, each name once, into a new
// map (an empty object too, as encoding/json does).
func (s *flatScanner) stringMap(p *map[string]string) bool {
	m := map[string]string{}
	ok := s.members(func(name string) bool {
		if _, dup := m[name]; dup {
			return false
		}
		v, ok := s.str()
		m[name] = v
		return ok
	})
	if ok {
		*p = m
	}
	return ok
}
