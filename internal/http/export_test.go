package http

// ParkedLen returns the number of requests parked off net/http.
func (s *Server) ParkedLen() int { return s.parked.Len() }

// FailNextGrantAnswer makes the next grant's answer panic as it is written.
func FailNextGrantAnswer() { grantAnswerFault.Store(true) }
