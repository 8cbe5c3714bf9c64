package io.airflowckpt.spark;

import java.util.Arrays;

import org.apache.hadoop.mapreduce.Job;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Spark's own Parquet writer for row-keyed checkpointed writes: the last data column is the hidden
 * source-key column ({@value #KEY_COLUMN}); it is not written to the files, and every value that
 * reaches the writer is recorded for the task attempt ({@link TaskKeys}) so that the commit
 * protocol can ship the task's keys to the driver with its commit message.
 *
 * <p>Used as {@code df.write.format("io.airflowckpt.spark.KeyedParquetFormat")} together with
 * {@link CheckpointCommitProtocol}; the rows never leave the JVM.
 */
public class KeyedParquetFormat extends ParquetFileFormat {
  private static final long serialVersionUID = 1L;

  /** Name of the hidden column that carries each row's source key (airflow_ckpt_provider.spark.keys). */
  public static final String KEY_COLUMN = "__ckpt_source_key";

  @Override
  public String shortName() {
    return "ckpt-keyed-parquet";
  }

  @Override
  public String toString() {
    return "KeyedParquet";
  }

  @Override
  public OutputWriterFactory prepareWrite(
      SparkSession session,
      Job job,
      scala.collection.immutable.Map<String, String> options,
      StructType dataSchema) {
    StructField[] fields = dataSchema.fields();
    int last = fields.length - 1;
    if (last < 0 || !KEY_COLUMN.equals(fields[last].name())) {
      throw new IllegalStateException(
          "KeyedParquetFormat needs the hidden column " + KEY_COLUMN + " as the last data column; "
              + "write through CheckpointedJob.write_parquet, not df.write");
    }
    StructType written = new StructType(Arrays.copyOf(fields, last));
    OutputWriterFactory parquet = super.prepareWrite(session, job, options, written);
    StructType keySchema = new StructType(new StructField[] {fields[last]});
    String timeZone = session.conf().get("spark.sql.session.timeZone");
    return new KeyTappingWriterFactory(parquet, written, keySchema, last, timeZone);
  }
}
