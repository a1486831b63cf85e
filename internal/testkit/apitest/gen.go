package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/lockapi/lockapi"
)

// Gen draws requests for the operations of openapi.yaml from the spec
// alone: valid ones, whose every input its schema accepts, and invalid ones,
// which break exactly one rule of one input. A contract test sends both and
// holds the server to the spec: every answer as documented, an invalid
// request refused with 400, a valid one never.
//
// Draws are small (short strings, few items) and repeatable: the same seed
// draws the same requests.
type Gen struct {
	doc *openapi3.T
	rnd *rand.Rand
}

// NewGen returns a generator seeded with seed.
func NewGen(seed uint64) (*Gen, error) {
	doc, err := openapi3.NewLoader().LoadFromData(lockapi.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("load openapi.yaml: %w", err)
	}
	return &Gen{doc: doc, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}, nil
}

// Operation is one operation of the spec.
type Operation struct {
	ID, Method, Path string
	params           openapi3.Parameters // the path's and the operation's
	body             *openapi3.RequestBody
}

// Operations returns every operation of the spec, by operationId.
func (g *Gen) Operations() []Operation {
	var ops []Operation
	for path, item := range g.doc.Paths.Map() {
		for method, op := range item.Operations() {
			o := Operation{ID: op.OperationID, Method: method, Path: path, params: slices.Concat(item.Parameters, op.Parameters)}
			if op.RequestBody != nil {
				o.body = op.RequestBody.Value
			}
			ops = append(ops, o)
		}
	}
	slices.SortFunc(ops, func(a, b Operation) int { return strings.Compare(a.ID, b.ID) })
	return ops
}

// Draft is a request before it is encoded: its inputs by where they go, as
// decoded values. A test may adjust a valid draft for what the spec cannot
// say (one member that excludes another), then encode it with Request.
type Draft struct {
	Op     Operation
	Path   map[string]string
	Query  map[string]any // a string, an integer, a boolean, or a []any
	Header map[string]string
	// Body is the JSON body's value (usually a map[string]any); nil: no
	// body. RawBody, when set, is sent instead, as it is.
	Body    any
	RawBody []byte
	// Broken says, of an invalid draft, which rule it breaks.
	Broken *Breach
}

// Breach is the one rule an invalid draft breaks.
type Breach struct {
	In   string // path, query, header or body
	Name string // the parameter or the body's top-level member; "" for the body as a whole
	Rule string // what is broken: pattern, maximum, required, type, null, ...
	// Value is the offending value, as drawn.
	Value any
}

func (b *Breach) String() string {
	if b.Name == "" {
		return fmt.Sprintf("%s: %s", b.In, b.Rule)
	}
	return fmt.Sprintf("%s %s: %s (%#v)", b.In, b.Name, b.Rule, b.Value)
}

// Valid draws a draft that the spec accepts: every required input and some
// optional ones, each valid by its schema.
func (g *Gen) Valid(op Operation) *Draft {
	d := &Draft{Op: op, Path: map[string]string{}, Query: map[string]any{}, Header: map[string]string{}}
	for _, ref := range op.params {
		p := ref.Value
		if !p.Required && g.rnd.IntN(2) == 0 {
			continue
		}
		v := g.value(p.Schema.Value)
		switch p.In {
		case openapi3.ParameterInPath:
			d.Path[p.Name] = fmt.Sprint(v)
		case openapi3.ParameterInQuery:
			d.Query[p.Name] = v
		case openapi3.ParameterInHeader:
			d.Header[p.Name] = fmt.Sprint(v)
		}
	}
	if op.body != nil && (op.body.Required || g.rnd.IntN(4) > 0) {
		if mt := op.body.Content.Get("application/json"); mt != nil {
			d.Body = g.value(mt.Schema.Value)
		}
	}
	return d
}

// Break makes a valid draft invalid by breaking one rule of one of its
// inputs, and records it in d.Broken. It returns false when it found no
// rule to break. skip, when not nil, rules out inputs (by where they go and
// their name) that the server knowingly does not check.
func (g *Gen) Break(d *Draft, skip func(in, name string) bool) bool {
	var cands []func() *Breach
	for _, ref := range d.Op.params {
		p := ref.Value
		if skip != nil && skip(p.In, p.Name) {
			continue
		}
		s := p.Schema.Value
		switch p.In {
		case openapi3.ParameterInPath:
			cands = append(cands, func() *Breach {
				v, rule := g.breakScalar(s, d.Path[p.Name], p.In)
				if rule == "" {
					return nil
				}
				d.Path[p.Name] = v
				return &Breach{In: p.In, Name: p.Name, Rule: rule, Value: v}
			})
		case openapi3.ParameterInQuery:
			cands = append(cands, func() *Breach { return g.breakQuery(d, p) })
		case openapi3.ParameterInHeader:
			cands = append(cands, func() *Breach {
				cur, ok := d.Header[p.Name]
				if !ok {
					cur = fmt.Sprint(g.value(s))
				}
				v, rule := g.breakScalar(s, cur, p.In)
				if rule == "" || v == "" { // an empty header is taken as absent
					return nil
				}
				d.Header[p.Name] = v
				return &Breach{In: p.In, Name: p.Name, Rule: rule, Value: v}
			})
		}
	}
	if d.Op.body != nil && (skip == nil || !skip("body", "")) {
		if mt := d.Op.body.Content.Get("application/json"); mt != nil {
			cands = append(cands, func() *Breach { return g.breakBody(d, mt.Schema.Value) })
		}
	}
	g.rnd.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	for _, c := range cands {
		if b := c(); b != nil {
			d.Broken = b
			return true
		}
	}
	return false
}

// Request encodes the draft as a request to the server at baseURL. Path
// parameters are percent-encoded byte by byte: bytes a path segment may not
// hold always; the others, in half the requests, at random. So the server
// meets both the spelling most clients send (which net/http keeps no raw
// form of) and any other, and must decode every one once.
func (d *Draft) Request(ctx context.Context, baseURL string, rnd *rand.Rand) (*http.Request, error) {
	path := d.Op.Path
	odds := 0 // in three, of encoding a byte that needs none
	if rnd.IntN(2) == 0 {
		odds = 1
	}
	for name, v := range d.Path {
		path = strings.ReplaceAll(path, "{"+name+"}", encodeSegment(v, rnd, odds))
	}
	q := url.Values{}
	for name, v := range d.Query {
		switch v := v.(type) {
		case []any:
			if d.explode(name) {
				for _, item := range v {
					q.Add(name, fmt.Sprint(item))
				}
			} else {
				parts := make([]string, len(v))
				for i, item := range v {
					parts[i] = fmt.Sprint(item)
				}
				q.Set(name, strings.Join(parts, ","))
			}
		default:
			q.Set(name, fmt.Sprint(v))
		}
	}
	target := baseURL + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	var body io.Reader
	raw := d.RawBody
	if raw == nil && d.Body != nil {
		var err error
		if raw, err = json.Marshal(d.Body); err != nil {
			return nil, err
		}
	}
	if raw != nil {
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, d.Op.Method, target, body)
	if err != nil {
		return nil, err
	}
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for name, v := range d.Header {
		req.Header.Set(name, v)
	}
	return req, nil
}

// explode reports whether the array query parameter name repeats itself
// (style form, explode true: the default) or is comma-separated.
func (d *Draft) explode(name string) bool {
	for _, ref := range d.Op.params {
		if p := ref.Value; p.Name == name && p.In == openapi3.ParameterInQuery {
			return p.Explode == nil || *p.Explode
		}
	}
	return true
}

// encodeSegment percent-encodes v for a path segment: every byte outside
// the unreserved set and ":" "@", and each of the others with odds in three.
func encodeSegment(v string, rnd *rand.Rand, odds int) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		plain := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~:@", c) >= 0
		if plain && rnd.IntN(3) >= odds {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// ---- valid values ----------------------------------------------------------

// value draws a value that s accepts.
func (g *Gen) value(s *openapi3.Schema) any {
	if len(s.AllOf) == 1 && s.Type == nil {
		return g.value(s.AllOf[0].Value)
	}
	if len(s.Enum) > 0 {
		return s.Enum[g.rnd.IntN(len(s.Enum))]
	}
	switch {
	case s.Type.Is("string"):
		return g.str(s)
	case s.Type.Is("integer"):
		lo, hi := bounds(s)
		return g.intIn(lo, hi)
	case s.Type.Is("boolean"):
		return g.rnd.IntN(2) == 0
	case s.Type.Is("array"):
		return g.array(s, int(s.MinItems))
	case s.Type.Is("object"):
		return g.object(s)
	}
	return g.alnum(1, 8)
}

// bounds returns the range an integer schema allows (the spec has no
// exclusive bounds), kept small where it is open.
func bounds(s *openapi3.Schema) (lo, hi int64) {
	lo, hi = 0, 1<<20
	if s.Min != nil {
		lo = int64(*s.Min)
		hi = lo + 1<<20
	}
	if s.Max != nil {
		hi = int64(*s.Max)
	}
	return lo, hi
}

// intIn draws from [lo, hi], often one of the ends.
func (g *Gen) intIn(lo, hi int64) int64 {
	switch g.rnd.IntN(5) {
	case 0:
		return lo
	case 1:
		return hi
	}
	return lo + g.rnd.Int64N(hi-lo+1)
}

func (g *Gen) str(s *openapi3.Schema) string {
	lo, hi := int(s.MinLength), 1<<10
	if s.MaxLength != nil {
		hi = int(*s.MaxLength)
	}
	for range 100 {
		var v string
		switch {
		case s.Pattern != "":
			v = g.fromPattern(s.Pattern)
		case s.Format == "date-time":
			v = "2026-11-23T17:00:00.000Z"
		default: // short, though the schema may allow more
			v = g.alnum(lo, max(lo, min(hi, lo+12)))
		}
		if n := utf8.RuneCountInString(v); n >= lo && n <= hi && s.VisitJSON(v) == nil {
			return v
		}
	}
	if v, ok := s.Example.(string); ok {
		return v
	}
	panic(fmt.Sprintf("apitest: cannot draw a string for %s", s.Pattern))
}

const alnumChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func (g *Gen) alnum(lo, hi int) string {
	n := lo + g.rnd.IntN(hi-lo+1)
	b := make([]byte, n)
	for i := range b {
		b[i] = alnumChars[g.rnd.IntN(len(alnumChars))]
	}
	return string(b)
}

func (g *Gen) array(s *openapi3.Schema, n int) []any {
	hi := n + 3
	if s.MaxItems != nil {
		hi = min(hi, int(*s.MaxItems))
	}
	n += g.rnd.IntN(hi - n + 1)
	items := []any{}
	for tries := 0; len(items) < n && tries < 20*n; tries++ {
		v := g.value(s.Items.Value)
		if s.UniqueItems && slices.ContainsFunc(items, func(x any) bool { return fmt.Sprint(x) == fmt.Sprint(v) }) {
			continue
		}
		items = append(items, v)
	}
	return items
}

func (g *Gen) object(s *openapi3.Schema) map[string]any {
	m := map[string]any{}
	for name, prop := range s.Properties {
		if slices.Contains(s.Required, name) || g.rnd.IntN(2) == 0 {
			m[name] = g.value(prop.Value)
		}
	}
	if both := notTogether(s); len(both) > 0 && hasAll(m, both) {
		delete(m, both[g.rnd.IntN(len(both))])
	}
	if ap := s.AdditionalProperties.Schema; ap != nil && len(s.Properties) == 0 {
		n := g.rnd.IntN(4)
		if s.MaxProps != nil {
			n = min(n, int(*s.MaxProps))
		}
		for range n {
			m[g.alnum(1, 8)] = g.value(ap.Value)
		}
	}
	return m
}

// notTogether returns the members an object schema forbids together
// (not: {required: [...]}), nil when none.
func notTogether(s *openapi3.Schema) []string {
	if s.Not == nil || s.Not.Value == nil {
		return nil
	}
	return s.Not.Value.Required
}

// hasAll reports whether m has every one of names.
func hasAll(m map[string]any, names []string) bool {
	for _, name := range names {
		if _, ok := m[name]; !ok {
			return false
		}
	}
	return true
}

// ---- breaking rules ----------------------------------------------------------

// breakScalar returns a string that breaks a rule of s, made from the valid
// v, and the rule; "" when it found none. in is where the string goes. In a
// path it favours the breach a server that decoded a path twice would let
// through: one character of v spelled as its percent-encoding, which
// decoded once holds a "%". In a header it breaks no rule with white space
// at either end, which HTTP strips.
func (g *Gen) breakScalar(s *openapi3.Schema, v string, in string) (string, string) {
	type try struct {
		rule string
		v    string
	}
	var tries []try
	switch {
	case s.Type.Is("integer"):
		lo, hi := bounds(s)
		tries = append(tries, try{"type", "x" + strconv.FormatInt(lo, 10)}, try{"type", strconv.FormatInt(lo, 10) + ".5"})
		if s.Min != nil {
			tries = append(tries, try{"minimum", strconv.FormatInt(lo-1, 10)})
		}
		if s.Max != nil {
			tries = append(tries, try{"maximum", strconv.FormatInt(hi+1, 10)})
		}
	case s.Type.Is("boolean"):
		tries = append(tries, try{"type", "yes"})
	case len(s.Enum) > 0:
		tries = append(tries, try{"enum", "nope"})
	case s.Type.Is("string"):
		if in == openapi3.ParameterInPath && v != "" {
			i := g.rnd.IntN(len(v))
			enc := fmt.Sprintf("%%%02X", v[i])
			tries = append(tries, try{"pattern", v[:i] + enc + v[i+1:]}, try{"pattern", v[:i] + enc + v[i+1:]})
		}
		for _, c := range []string{"%", " ", "*", "é", "{", "/"} {
			i := g.rnd.IntN(len(v) + 1)
			tries = append(tries, try{"pattern", v[:i] + c + v[i:]})
		}
		if s.MaxLength != nil {
			tries = append(tries, try{"maxLength", strings.Repeat(firstRune(v), int(*s.MaxLength)+1)})
		}
		if s.MinLength > 1 || s.MinLength == 1 && in != openapi3.ParameterInPath {
			// An empty path parameter would be another route.
			tries = append(tries, try{"minLength", string([]rune(v)[:s.MinLength-1])})
		}
	}
	g.rnd.Shuffle(len(tries), func(i, j int) { tries[i], tries[j] = tries[j], tries[i] })
	for _, t := range tries {
		if in == openapi3.ParameterInHeader && strings.TrimSpace(t.v) != t.v {
			continue
		}
		if !schemaAccepts(s, t.v) {
			return t.v, t.rule
		}
	}
	return "", ""
}

// schemaAccepts reports whether s accepts the text v of a parameter: as an
// integer or a boolean where s wants one.
func schemaAccepts(s *openapi3.Schema, v string) bool {
	var x any = v
	switch {
	case s.Type.Is("integer"):
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return false
		}
		x = n
	case s.Type.Is("boolean"):
		b, err := strconv.ParseBool(v)
		if err != nil || (v != "true" && v != "false") {
			return false
		}
		x = b
	}
	return s.VisitJSON(x) == nil
}

func firstRune(v string) string {
	if r, _ := utf8.DecodeRuneInString(v); r != utf8.RuneError {
		return string(r)
	}
	return "a"
}

// breakQuery breaks a rule of the query parameter p.
func (g *Gen) breakQuery(d *Draft, p *openapi3.Parameter) *Breach {
	s := p.Schema.Value
	if p.Required && g.rnd.IntN(3) == 0 {
		delete(d.Query, p.Name)
		return &Breach{In: p.In, Name: p.Name, Rule: "required"}
	}
	if s.Type.Is("array") {
		items := s.Items.Value
		cur, _ := d.Query[p.Name].([]any)
		if len(cur) == 0 {
			cur = g.array(s, max(int(s.MinItems), 1))
		}
		var tries []func() ([]any, string)
		if s.MaxItems != nil {
			tries = append(tries, func() ([]any, string) {
				return g.arrayOf(items, int(*s.MaxItems)+1, s.UniqueItems), "maxItems"
			})
		}
		if s.UniqueItems {
			tries = append(tries, func() ([]any, string) { return append(slices.Clone(cur), cur[0]), "uniqueItems" })
		}
		tries = append(tries, func() ([]any, string) {
			v, rule := g.breakScalar(items, fmt.Sprint(cur[0]), p.In)
			if rule == "" || strings.Contains(v, ",") {
				return nil, ""
			}
			out := slices.Clone(cur)
			out[g.rnd.IntN(len(out))] = v
			return out, "items " + rule
		})
		g.rnd.Shuffle(len(tries), func(i, j int) { tries[i], tries[j] = tries[j], tries[i] })
		for _, t := range tries {
			if v, rule := t(); rule != "" && s.VisitJSON(toJSON(v)) != nil {
				d.Query[p.Name] = v
				return &Breach{In: p.In, Name: p.Name, Rule: rule, Value: v}
			}
		}
		return nil
	}
	cur, ok := d.Query[p.Name]
	if !ok {
		cur = g.value(s)
	}
	v, rule := g.breakScalar(s, fmt.Sprint(cur), p.In)
	if rule == "" {
		return nil
	}
	d.Query[p.Name] = v
	return &Breach{In: p.In, Name: p.Name, Rule: rule, Value: v}
}

// arrayOf draws n valid items of s, distinct when unique.
func (g *Gen) arrayOf(s *openapi3.Schema, n int, unique bool) []any {
	items := []any{}
	seen := map[string]bool{}
	for tries := 0; len(items) < n && tries < 50*n; tries++ {
		v := g.value(s)
		if k := fmt.Sprint(v); unique && seen[k] {
			continue
		} else {
			seen[k] = true
		}
		items = append(items, v)
	}
	return items
}

// breakBody breaks a rule of the JSON body, whose schema is s.
func (g *Gen) breakBody(d *Draft, s *openapi3.Schema) *Breach {
	if g.rnd.IntN(8) == 0 {
		bodies := [][]byte{[]byte(`[]`), []byte(`{"owner":`), []byte(`{} {}`), []byte(`"body"`)}
		d.RawBody = bodies[g.rnd.IntN(len(bodies))]
		return &Breach{In: "body", Rule: "not one JSON object", Value: string(d.RawBody)}
	}
	m, ok := d.Body.(map[string]any)
	if !ok {
		m = g.object(s)
	}
	m = cloneMap(m)
	var tries []func() *Breach
	for _, name := range s.Required {
		tries = append(tries, func() *Breach {
			delete(m, name)
			return &Breach{In: "body", Name: name, Rule: "required"}
		})
	}
	if ap := s.AdditionalProperties; ap.Has != nil && !*ap.Has {
		tries = append(tries, func() *Breach {
			m["zz_unknown"] = 1
			return &Breach{In: "body", Name: "zz_unknown", Rule: "additionalProperties"}
		})
	}
	both := notTogether(s)
	if len(both) > 0 {
		tries = append(tries, func() *Breach {
			for _, name := range both {
				if _, ok := m[name]; !ok {
					m[name] = g.value(s.Properties[name].Value)
				}
			}
			return &Breach{In: "body", Rule: "not all of " + strings.Join(both, ", ")}
		})
	}
	for name, prop := range s.Properties {
		tries = append(tries, func() *Breach {
			cur, ok := m[name]
			if !ok {
				cur = g.value(prop.Value)
			}
			v, rule := g.breakJSON(prop.Value, cur)
			if rule == "" {
				return nil
			}
			m[name] = v
			// One rule broken: a member that completes a group that may
			// not be given together takes another's place.
			if slices.Contains(both, name) && hasAll(m, both) {
				for _, other := range both {
					if other != name {
						delete(m, other)
						break
					}
				}
			}
			return &Breach{In: "body", Name: name, Rule: rule, Value: v}
		})
	}
	g.rnd.Shuffle(len(tries), func(i, j int) { tries[i], tries[j] = tries[j], tries[i] })
	for _, t := range tries {
		if b := t(); b != nil {
			if s.VisitJSON(toJSON(m)) == nil {
				return nil // not broken after all: leave the draft valid
			}
			d.Body = m
			return b
		}
	}
	return nil
}

// breakJSON returns a JSON value that breaks a rule of s, made from the
// valid v, and the rule; "" when it found none.
func (g *Gen) breakJSON(s *openapi3.Schema, v any) (any, string) {
	if len(s.AllOf) == 1 && s.Type == nil {
		s = s.AllOf[0].Value
	}
	type try struct {
		rule string
		v    any
	}
	tries := []try{{"null", nil}}
	switch {
	case s.Type.Is("string"):
		tries = append(tries, try{"type", 7})
		if str, ok := v.(string); ok {
			if alt, rule := g.breakScalar(s, str, "body"); rule != "" {
				tries = append(tries, try{rule, alt})
			}
		}
	case s.Type.Is("integer"):
		lo, hi := bounds(s)
		tries = append(tries, try{"type", strconv.FormatInt(lo, 10)}, try{"type", float64(lo) + 0.5})
		if s.Min != nil {
			tries = append(tries, try{"minimum", lo - 1})
		}
		if s.Max != nil {
			tries = append(tries, try{"maximum", hi + 1})
		}
	case s.Type.Is("boolean"):
		tries = append(tries, try{"type", "true"})
	case s.Type.Is("array"):
		tries = append(tries, try{"type", map[string]any{}})
		cur, _ := v.([]any)
		if len(cur) == 0 {
			cur = g.arrayOf(s.Items.Value, max(int(s.MinItems), 1), s.UniqueItems)
		}
		if s.MaxItems != nil {
			tries = append(tries, try{"maxItems", g.arrayOf(s.Items.Value, int(*s.MaxItems)+1, s.UniqueItems)})
		}
		if s.MinItems > 0 {
			tries = append(tries, try{"minItems", []any{}})
		}
		if s.UniqueItems && len(cur) > 0 {
			tries = append(tries, try{"uniqueItems", append(slices.Clone(cur), cur[0])})
		}
		if item, rule := g.breakJSON(s.Items.Value, cur[0]); rule != "" {
			out := slices.Clone(cur)
			out[g.rnd.IntN(len(out))] = item
			tries = append(tries, try{"items " + rule, out})
		}
	case s.Type.Is("object"):
		tries = append(tries, try{"type", []any{}})
		if ap := s.AdditionalProperties.Schema; ap != nil {
			cur, _ := v.(map[string]any)
			m := cloneMap(cur)
			key := g.alnum(1, 8)
			if val, rule := g.breakJSON(ap.Value, g.value(ap.Value)); rule != "" {
				m[key] = val
				tries = append(tries, try{"values " + rule, m})
			}
			if s.MaxProps != nil {
				big := map[string]any{}
				for len(big) <= int(*s.MaxProps) {
					big[g.alnum(1, 8)] = g.value(ap.Value)
				}
				tries = append(tries, try{"maxProperties", big})
			}
		}
	}
	g.rnd.Shuffle(len(tries), func(i, j int) { tries[i], tries[j] = tries[j], tries[i] })
	for _, t := range tries {
		if s.VisitJSON(toJSON(t.v)) != nil {
			return t.v, t.rule
		}
	}
	return nil, ""
}

// toJSON turns v into what a JSON decoder makes of it (float64 numbers),
// the form schema validation expects.
func toJSON(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// cloneMap copies m; a nil m makes an empty map.
func cloneMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	maps.Copy(out, m)
	return out
}
