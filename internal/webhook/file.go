package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/lockapi/lockapi/internal/lock"
)

// File is the JSON form of the webhooks file (LOCKAPI_WEBHOOKS_FILE):
//
//	{"webhooks": [
//	  {"id": "ci-next-job", "url": "https://ci.example/hooks/lockapi",
//	   "prefix": "ci:", "types": ["released"],
//	   "secrets": ["whsec_..."]}
//	]}
//
// Every instance must read the same file: the id names the subscription's
// cursor and dead letters in the shared State. Secrets are kept by whoever
// writes the file (`lockapi` generates none for it); with two, each
// delivery carries both signatures, for a rotation.
type File struct {
	Webhooks []FileWebhook `json:"webhooks"`
}

// FileWebhook is one subscription of the file.
type FileWebhook struct {
	ID      string   `json:"id"`
	URL     string   `json:"url"`
	Prefix  string   `json:"prefix"`
	Types   []string `json:"types"`
	Secrets []string `json:"secrets"`
}

// LoadFile reads the webhooks file at path and checks every subscription
// as the API would, except that host names are resolved only when
// delivering (DNS may not answer while lockapi starts).
func LoadFile(path string, p Policy) ([]Subscription, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseFile(data, p)
}

// ParseFile is LoadFile on the file's contents.
func ParseFile(data []byte, p Policy) ([]Subscription, error) {
	var f File
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("webhooks file: %w", err)
	}
	var errs []error
	var subs []Subscription
	ids, keys := map[string]bool{}, map[string]string{}
	for i, fw := range f.Webhooks {
		field := fmt.Sprintf("webhooks[%d].", i)
		bad := func(name, detail string) { errs = append(errs, fmt.Errorf("%s%s: %s", field, name, detail)) }
		sub, err := p.Normalize(field, Spec{URL: fw.URL, Prefix: fw.Prefix, Types: fw.Types})
		if err != nil {
			for _, fe := range lock.AsError(err).Fields {
				errs = append(errs, fmt.Errorf("%s: %s", fe.Field, fe.Detail))
			}
		}
		if fe := CheckID(field+"id", fw.ID); fe != nil {
			bad("id", fe.Detail)
		} else if ids[fw.ID] {
			bad("id", fmt.Sprintf("%q appears more than once", fw.ID))
		}
		ids[fw.ID] = true
		if len(fw.Secrets) == 0 {
			bad("secrets", "at least one secret is required (whsec_ and base64 of 24-64 random bytes, e.g. from `openssl rand -base64 32`)")
		}
		for j, s := range fw.Secrets {
			if _, err := SecretKey(s); err != nil {
				bad(fmt.Sprintf("secrets[%d]", j), err.Error())
			}
		}
		if err != nil {
			continue
		}
		sub.ID, sub.Secrets, sub.Source = fw.ID, fw.Secrets, SourceFile
		if other, ok := keys[sub.DedupeKey()]; ok {
			bad("url", fmt.Sprintf("webhook %q has the same url, prefix and types", other))
		}
		keys[sub.DedupeKey()] = fw.ID
		subs = append(subs, sub)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("webhooks file: %w", errors.Join(errs...))
	}
	return subs, nil
}
