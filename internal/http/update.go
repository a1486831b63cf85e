package http

import (
	"net/http"

	"github.com/lockapi/lockapi/internal/auth"
	"github.com/lockapi/lockapi/internal/lock"
)

// updateBody is the body of PATCH /v1/locks/{name}/leases/{lease_id}.
type updateBody struct {
	Metadata map[string]string `json:"metadata"`
}

// handleUpdate handles the "PATCH /v1/locks/{name}/leases/{lease_id}"
// route: it replaces the lease's metadata, by the rules of an acquire's,
// and leaves its token and TTL as they are. A leader announces its value
// with it (docs/ELECTIONS.md); watchers of the lock see the change.
func (s *Server) handleUpdate(w http.ResponseWriter, r *http.Request) {
	var body updateBody
	if err := decodeBody(w, r, &body); err != nil {
		Error(w, r, err)
		return
	}
	name, leaseID, fields := leasePath(r)
	if body.Metadata == nil {
		fields = append(fields, lock.FieldError{Field: "metadata", Detail: "required: the lease's new metadata, {} for none"})
	} else if fe := lock.CheckMetadata("metadata", body.Metadata); fe != nil {
		fields = append(fields, *fe)
	}
	if len(fields) > 0 {
		Error(w, r, lock.Invalid(fields...))
		return
	}
	c := callerOf(r)
	if err := authorize(c, auth.ScopeWrite, name); err != nil {
		Error(w, r, err)
		return
	}

	l, err := s.store.Update(r.Context(), leaseRef(c, name, leaseID), body.Metadata)
	if err != nil {
		Error(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, s.newLease(l))
}
