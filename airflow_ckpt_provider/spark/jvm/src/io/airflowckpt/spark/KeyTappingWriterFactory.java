package io.airflowckpt.spark;

import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.datasources.OutputWriter;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.types.StructType;

/** Wraps Parquet's writer factory: each file's writer drops the key column and records its values. */
final class KeyTappingWriterFactory extends OutputWriterFactory {
  private static final long serialVersionUID = 1L;

  private final OutputWriterFactory parquet;
  private final StructType written;
  private final StructType keySchema;
  private final int keyOrdinal;
  private final String timeZone;

  KeyTappingWriterFactory(
      OutputWriterFactory parquet, StructType written, StructType keySchema, int keyOrdinal, String timeZone) {
    this.parquet = parquet;
    this.written = written;
    this.keySchema = keySchema;
    this.keyOrdinal = keyOrdinal;
    this.timeZone = timeZone;
  }

  @Override
  public String getFileExtension(TaskAttemptContext context) {
    return parquet.getFileExtension(context);
  }

  @Override
  public OutputWriter newInstance(String path, StructType dataSchema, TaskAttemptContext context) {
    OutputWriter file = parquet.newInstance(path, written, context);
    return new Writer(file, TaskKeys.forCurrentTask(keySchema, timeZone), keyOrdinal, written);
  }

  /** One output file: rows go to Parquet without their last column; their keys go to the task's record. */
  private static final class Writer extends OutputWriter {
    private final OutputWriter file;
    private final TaskKeys keys;
    private final RowSlice data;
    private final RowSlice key;

    Writer(OutputWriter file, TaskKeys keys, int keyOrdinal, StructType written) {
      this.file = file;
      this.keys = keys;
      this.data = RowSlice.prefix(written);
      this.key = RowSlice.single(keyOrdinal);
    }

    @Override
    public void write(InternalRow row) {
      keys.add(key.over(row));
      file.write(data.over(row));
    }

    @Override
    public void close() {
      file.close();
    }

    @Override
    public String path() {
      return file.path();
    }
  }
}
