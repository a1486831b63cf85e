package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/lockapi/lockapi/internal/lock"
)

const (
	// MaxBodyBytes is the largest request body accepted (413 above).
	MaxBodyBytes = 64 << 10
	// DefaultBodyTimeout is how long a client has to send a request's
	// body (Config.BodyTimeout; body.go).
	DefaultBodyTimeout = 30 * time.Second
)

// decodeBody decodes an optional JSON object body into v, a pointer to a
// struct whose fields are all optional. An empty body leaves v untouched.
// Decoding is strict: the body must be one JSON object with only v's
// fields, spelled exactly, no null anywhere, and values of the right types.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	ct := r.Header.Get("Content-Type")
	if r.ContentLength > 0 && !isJSON(ct) {
		return errMediaType
	}
	// No content coding is decoded: a compressed body would be read as
	// JSON, and a gzip bomb is no risk where nothing inflates it.
	if ce := r.Header.Values("Content-Encoding"); len(ce) > 1 || len(ce) == 1 && !strings.EqualFold(ce[0], "identity") {
		return errContentEncoding
	}

	if r.ContentLength > MaxBodyBytes {
		return errTooLarge
	}

	data, err := bodyBytes(r)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return errTooLarge
		}
		return lock.Invalid(lock.FieldError{Field: "body", Detail: "the request body could not be read"})
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil
	}
	if !isJSON(ct) {
		return errMediaType
	}
	if data[0] != '{' {
		return lock.Invalid(lock.FieldError{Field: "body", Detail: "must be a JSON object"})
	}

	// encoding/json would turn invalid UTF-8 into U+FFFD, so that different
	// byte strings became the same owner; refuse them instead.
	if !utf8.Valid(data) {
		return lock.Invalid(lock.FieldError{Field: "body", Detail: "must be valid UTF-8"})
	}
	if decodeFlat(data, v) {
		return nil
	}
	return decodeStrict(data, v)
}

// decodeStrict decodes the JSON object in data into v with encoding/json,
// after checkJSON refused what encoding/json would let through.
func decodeStrict(data []byte, v any) error {
	if err := checkJSON(data, jsonFields(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	return nil
}

// checkJSON walks the JSON text once and refuses what encoding/json lets
// through: member names of the top-level object that are not v's fields
// spelled exactly (encoding/json matches them case-insensitively),
// duplicate member names in any object (encoding/json keeps the last, while
// a proxy in front of lockapi may read the first), null anywhere (it would
// decode as absent, or as "" in a map of strings, while no member of the
// schema is nullable), and anything after the object. Syntax errors are
// left to the decoder, which reports them better.
func checkJSON(data []byte, known map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	type object struct {
		seen      map[string]bool
		expectKey bool
	}
	var stack []*object
	member := "" // the top-level member being read
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		var top *object
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.expectKey {
			if key, ok := tok.(string); ok {
				if top.seen[key] {
					return lock.Invalid(lock.FieldError{Field: key, Detail: "appears more than once"})
				}
				top.seen[key] = true
				if len(stack) == 1 {
					if !known[key] {
						return lock.Invalid(lock.FieldError{Field: key, Detail: "unknown field"})
					}
					member = key
				}
				top.expectKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &object{seen: map[string]bool{}, expectKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, nil) // arrays hold no member names
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		case nil:
			detail := "must not be null: leave it out for its default"
			if len(stack) > 1 {
				detail = "must not hold null"
			}
			return lock.Invalid(lock.FieldError{Field: member, Detail: detail})
		}
		if len(stack) == 0 {
			if len(bytes.TrimSpace(data[dec.InputOffset():])) > 0 {
				return lock.Invalid(lock.FieldError{Field: "body", Detail: "unexpected data after the JSON object"})
			}
			return nil
		}
		// A value ended: the enclosing object, if any, expects a key next.
		if n := len(stack); n > 0 && stack[n-1] != nil {
			stack[n-1].expectKey = true
		}
	}
}

// readBody reads a request's whole body. A body of known length is read
// into a buffer of that size (plus one byte, to see the end), rather than
// io.ReadAll's 512 bytes and growth.
func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength <= 0 {
		return io.ReadAll(r.Body)
	}
	buf := make([]byte, 0, r.ContentLength+1)
	for {
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) {
			// More than the length said: net/http does not let that
			// through, but read on as io.ReadAll would.
			rest, err := io.ReadAll(r.Body)
			return append(buf, rest...), err
		}
	}
}

var (
	errMediaType = &httpError{kindMediaType, "the request body must be application/json"}
	errTooLarge  = &httpError{kindTooLarge, fmt.Sprintf("the request body is over %d bytes", MaxBodyBytes)}
	// errContentEncoding refuses a body with a content coding (RFC 9110
	// §15.5.16): lockapi decodes none.
	errContentEncoding = &httpError{kindMediaType, "the request body must be plain application/json: no Content-Encoding (gzip, deflate, ...) is decoded"}
)

// isJSON reports whether a Content-Type is application/json, with any
// parameters.
func isJSON(ct string) bool {
	if ct == "application/json" {
		return true // as almost every client spells it: no parsing
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// fieldsByType caches jsonFields per body type: the set never changes, and
// decodeBody is on every request's path.
var fieldsByType sync.Map // reflect.Type -> map[string]bool

// jsonFields returns the JSON member names of the struct v points to.
func jsonFields(v any) map[string]bool {
	t := reflect.TypeOf(v).Elem()
	if f, ok := fieldsByType.Load(t); ok {
		return f.(map[string]bool)
	}
	fields := make(map[string]bool, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fields[name] = true
		}
	}
	fieldsByType.Store(t, fields)
	return fields
}

// decodeError turns a json.Decoder error into an invalid-request error
// naming the offending field.
func decodeError(err error) error {
	if e, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		field := e.Field
		if field == "" {
			field = "body"
		}
		return lock.Invalid(lock.FieldError{Field: field, Detail: fmt.Sprintf("must be %s (got %s)", jsonType(e.Type), e.Value)})
	}
	if e, ok := errors.AsType[*json.SyntaxError](err); ok {
		return lock.Invalid(lock.FieldError{Field: "body", Detail: fmt.Sprintf("malformed JSON at byte %d", e.Offset)})
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return lock.Invalid(lock.FieldError{Field: "body", Detail: "malformed JSON: unexpected end of body"})
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if unq, err := strconv.Unquote(name); err == nil {
			name = unq
		}
		return lock.Invalid(lock.FieldError{Field: name, Detail: "unknown field"})
	}
	return lock.Invalid(lock.FieldError{Field: "body", Detail: "malformed JSON"})
}

// jsonType names the JSON type that a Go type decodes from.
func jsonType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return fmt.Sprintf("a %d-bit integer", t.Bits())
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "a " + t.String()
}

// query holds a request's parsed query and the problems found reading it.
type query struct {
	values url.Values
	fields []lock.FieldError
}

// parseQuery parses r's query string strictly: a malformed query string is
// an error rather than silently dropped pairs.
func parseQuery(r *http.Request) *query {
	if r.URL.RawQuery == "" {
		return &query{} // most requests: nothing to parse
	}
	values, err := url.ParseQuery(r.URL.RawQuery)
	q := &query{values: values}
	if err != nil {
		q.fields = append(q.fields, lock.FieldError{Field: "query", Detail: "malformed query string"})
	}
	return q
}

func (q *query) fail(name, detail string) {
	q.fields = append(q.fields, lock.FieldError{Field: name, Detail: detail})
}

// str returns the one value of a parameter, and whether it was given.
func (q *query) str(name string) (string, bool) {
	vs, ok := q.values[name]
	if !ok {
		return "", false
	}
	if len(vs) > 1 {
		q.fail(name, "must be given at most once")
		return "", false
	}
	return vs[0], true
}

// int returns an integer parameter in [lo, hi], or def when it is absent.
// Values above hi are clamped to hi when clamp is set.
func (q *query) int(name string, def, lo, hi int64, clamp bool) int64 {
	s, ok := q.str(name)
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil:
		q.fail(name, "must be an integer")
	case n < lo || (n > hi && !clamp):
		if clamp {
			q.fail(name, fmt.Sprintf("must be at least %d", lo))
		} else {
			q.fail(name, fmt.Sprintf("must be between %d and %d", lo, hi))
		}
	case n > hi:
		return hi
	default:
		return n
	}
	return def
}

// bool returns a boolean parameter, "true" or "false", or false when it is
// absent.
func (q *query) bool(name string) bool {
	s, ok := q.str(name)
	if !ok {
		return false
	}
	switch s {
	case "true":
		return true
	case "false":
		return false
	}
	q.fail(name, `must be "true" or "false"`)
	return false
}

// err returns the invalid-request error for the problems found, or nil.
func (q *query) err() error {
	if len(q.fields) == 0 {
		return nil
	}
	return lock.Invalid(q.fields...)
}

// pathParam returns a route parameter, percent-decoded once. The router
// matches the path as the client spelled it (routeEscaped), so
// "deploy%3Aprod" is the name "deploy:prod", and "dbl%253Atest" is
// "dbl%3Atest", which fails validation: two spellings never reach one lock.
// A parameter that does not decode is returned as it is and fails
// validation.
func pathParam(r *http.Request, key string) string {
	raw := chi.URLParam(r, key)
	if v, err := url.PathUnescape(raw); err == nil {
		return v
	}
	return raw
}

// routeEscaped makes the router match the percent-encoded path. net/http
// keeps that spelling in r.URL.RawPath only when it differs from the
// default encoding of the decoded r.URL.Path, and chi matches whichever of
// the two is set: its parameters would be decoded in some requests and not
// in others.
func routeEscaped(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rctx := chi.RouteContext(r.Context()); rctx != nil && rctx.RoutePath == "" {
			rctx.RoutePath = r.URL.EscapedPath()
		}
		next.ServeHTTP(w, r)
	})
}
