package io.airflowckpt.spark;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.channels.Channels;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.arrow.compression.CommonsCompressionFactory;
import org.apache.arrow.vector.compression.CompressionUtil;
import org.apache.arrow.vector.ipc.ArrowStreamWriter;
import org.apache.arrow.vector.ipc.message.IpcOption;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.execution.arrow.ArrowWriter;
import org.apache.spark.sql.types.StructType;

/**
 * The source keys one task attempt wrote, as a zstd-compressed Arrow IPC stream (one column), in the
 * executor's JVM until the attempt commits ({@link #take}) or ends ({@link #discard}).
 *
 * <p>Keys are appended in Spark's own Arrow conversion (the one PySpark uses), in batches of
 * {@value #BATCH_ROWS} rows, so a task holds its keys compressed, not as objects.
 */
final class TaskKeys {
  static final int BATCH_ROWS = 65536;

  private static final ConcurrentHashMap<Long, TaskKeys> BY_ATTEMPT = new ConcurrentHashMap<>();

  private final ArrowWriter arrow;
  private final ByteArrayOutputStream bytes = new ByteArrayOutputStream();
  private final ArrowStreamWriter stream;
  private long rows;
  private int pending;
  private boolean closed;

  private TaskKeys(StructType keySchema, String timeZone) {
    this.arrow = ArrowWriter.create(keySchema, timeZone, false, false);
    this.stream = new ArrowStreamWriter(
        arrow.root(),
        null,
        Channels.newChannel(bytes),
        IpcOption.DEFAULT,
        CommonsCompressionFactory.INSTANCE,
        CompressionUtil.CodecType.ZSTD);
    try {
      stream.start();
    } catch (IOException e) {
      throw new RuntimeException(e);
    }
  }

  /** The record of the current task attempt (created on its first row; dropped when the attempt ends). */
  static TaskKeys forCurrentTask(StructType keySchema, String timeZone) {
    TaskContext task = TaskContext.get();
    long id = task == null ? -1L : task.taskAttemptId();
    TaskKeys existing = BY_ATTEMPT.get(id);
    if (existing != null) {
      return existing;
    }
    TaskKeys created = new TaskKeys(keySchema, timeZone);
    BY_ATTEMPT.put(id, created);
    if (task != null) {
      task.addTaskCompletionListener((org.apache.spark.util.TaskCompletionListener) ctx -> discard(ctx.taskAttemptId()));
    }
    return created;
  }

  /** The attempt's keys (Arrow IPC bytes) and row count, or null if it wrote no row. Removes the record. */
  static Taken take(long taskAttemptId) {
    TaskKeys keys = BY_ATTEMPT.remove(taskAttemptId);
    if (keys == null) {
      return null;
    }
    return new Taken(keys.finish(), keys.rows);
  }

  static void discard(long taskAttemptId) {
    TaskKeys keys = BY_ATTEMPT.remove(taskAttemptId);
    if (keys != null) {
      keys.close();
    }
  }

  void add(InternalRow keyRow) {
    arrow.write(keyRow);
    rows++;
    if (++pending >= BATCH_ROWS) {
      flush();
    }
  }

  private void flush() {
    if (pending == 0) {
      return;
    }
    arrow.finish();
    try {
      stream.writeBatch();
    } catch (IOException e) {
      throw new RuntimeException(e);
    }
    arrow.reset();
    pending = 0;
  }

  private byte[] finish() {
    try {
      flush();
      stream.end();
      return bytes.toByteArray();
    } catch (IOException e) {
      throw new RuntimeException(e);
    } finally {
      close();
    }
  }

  private void close() {
    if (!closed) {
      closed = true;
      stream.close();
      arrow.root().close();
    }
  }

  /** What {@link #take} returns. */
  static final class Taken {
    final byte[] ipc;
    final long rows;

    Taken(byte[] ipc, long rows) {
      this.ipc = ipc;
      this.rows = rows;
    }
  }
}
