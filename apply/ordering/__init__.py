"""Which decoded events may be applied, and in what order: the gate (`gate`: events wait in memory or on disk,
`spill`, until released in commitTs or offset order) and how far each Kafka partition is known complete
(`completeness`: watermarks, looks at end offsets, topics by pattern).

Pure: no Spark, Delta or Kafka client; imports nothing of apply/.
"""
