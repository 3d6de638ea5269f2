"""What each call consumed, cost and took: turn and call records, the price book, latency
definitions, quantiles and the serving planner."""
