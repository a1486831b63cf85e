package http

// ParkedLen returns the number of requests parked off net/http.
func (s *Server) ParkedLen() int { return s.parked.Len() }
