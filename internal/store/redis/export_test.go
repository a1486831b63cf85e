package redis

// UseEval makes s run its scripts with EVALSHA and EVAL, as it does on a
// Redis without Functions (6.2).
func UseEval(s *Store) { s.scripts.lib.mode.Store(modeEval) }
