package io.airflowckpt.spark;

import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.JobContext;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.parquet.hadoop.ParquetFileReader;
import org.apache.parquet.hadoop.metadata.BlockMetaData;
import org.apache.parquet.hadoop.metadata.ParquetMetadata;
import org.apache.spark.TaskContext;
import org.apache.spark.internal.io.FileCommitProtocol;
import org.apache.spark.internal.io.FileNameSpec;

import scala.Option;
import scala.collection.immutable.Seq;

/**
 * The commit protocol of airflow_ckpt_provider's native (JVM) Parquet writer.
 *
 * <p>Spark's own Parquet writer does the writing; this protocol only decides the file names and
 * reports each committed task to the driver, where the Python job seals one checkpoint per task
 * in the store. The checkpoint protocol's invariants are kept as follows:
 *
 * <ul>
 *   <li>Direct writes, names no other attempt can produce: {@code part-PPPPP-TOKEN-aN-RAND.ext}
 *       under the output directory (no staging directory, no rename: object stores have none).
 *   <li>Intent before write: before the job, the driver records in the store that every file of
 *       this write carries {@code -TOKEN-} in its name, so the commit can delete the files of
 *       failed, duplicate and zombie attempts exactly (and no file it did not write).
 *   <li>Fencing: with a store on a Hadoop filesystem, a task gives up before writing anything when
 *       the next epoch's record exists (this attempt belongs to a superseded run).
 *   <li>A task that fails deletes what it wrote (best effort) before the failure propagates.
 *   <li>{@code onTaskCommit} runs on the driver once per partition (the first attempt to succeed);
 *       the driver's Python side drains {@link Commits#drain()} and seals.
 * </ul>
 *
 * <p>Configuration comes from the write's options (Hadoop conf): {@code ckpt.write.token} (required),
 * {@code ckpt.fence.path} (optional).
 */
public class CheckpointCommitProtocol extends FileCommitProtocol implements Serializable {
  private static final long serialVersionUID = 1L;

  public static final String TOKEN_CONF = "ckpt.write.token";
  public static final String FENCE_CONF = "ckpt.fence.path";
  /** Driver-local directory where the keys of row-keyed writes' committed tasks are left for Python. */
  public static final String KEYS_DIR_CONF = "ckpt.keys.dir";

  /** Committed tasks per write token, waiting for the driver's Python side. Driver JVM only. */
  private static final ConcurrentHashMap<String, ConcurrentLinkedQueue<String>> COMMITTED =
      new ConcurrentHashMap<>();
  /** Per write token: how many tasks the job committed (Spark's count, known once the job succeeded). */
  private static final ConcurrentHashMap<String, Integer> JOB_TASKS = new ConcurrentHashMap<>();

  private final String jobId;
  private final String outputPath;
  private String token;
  private String fencePath;
  private String keysDir;

  // Per task attempt (the executor's deserialized copy of the protocol is used by one task).
  private transient List<String> written;
  private transient long startedNanos;

  public CheckpointCommitProtocol(String jobId, String path, boolean dynamicPartitionOverwrite) {
    if (dynamicPartitionOverwrite) {
      throw new UnsupportedOperationException(
          "airflow_ckpt_provider's writer does not overwrite partitions: the commit decides what stays");
    }
    this.jobId = jobId;
    this.outputPath = path;
  }

  public CheckpointCommitProtocol(String jobId, String path) {
    this(jobId, path, false);
  }

  /**
   * The driver's handle on one write's committed tasks. Python calls its methods from any
   * thread (an object reference needs no class lookup, which fails in threads whose class loader
   * does not see a jar added at run time).
   */
  public static final class Commits {
    private final String token;

    private Commits(String token) {
      this.token = token;
    }

    /** Everything committed since the last call, one JSON object per line. */
    public String drain() {
      ConcurrentLinkedQueue<String> queue = COMMITTED.get(token);
      if (queue == null) {
        return "";
      }
      StringBuilder out = new StringBuilder();
      String line;
      while ((line = queue.poll()) != null) {
        out.append(line).append('\n');
      }
      return out.toString();
    }

    /** Stop collecting; returns what was not drained yet. */
    public String close() {
      String rest = drain();
      COMMITTED.remove(token);
      return rest;
    }

    /** How many tasks the successful job committed (one per partition), or -1 if the job did not succeed. */
    public int jobTasks() {
      Integer count = JOB_TASKS.remove(token);
      return count == null ? -1 : count;
    }
  }

  /** Start collecting the commits of the write with {@code token} (the driver, before the write). */
  public static Commits open(String token) {
    COMMITTED.putIfAbsent(token, new ConcurrentLinkedQueue<>());
    return new Commits(token);
  }

  private void configure(Configuration conf) {
    token = conf.get(TOKEN_CONF);
    fencePath = conf.get(FENCE_CONF);
    keysDir = conf.get(KEYS_DIR_CONF);
    if (token == null || token.isEmpty()) {
      throw new IllegalStateException(
          "CheckpointCommitProtocol needs the option " + TOKEN_CONF
              + ": write through CheckpointedJob.write_parquet, not df.write");
    }
  }

  @Override
  public void setupJob(JobContext jobContext) {
    configure(jobContext.getConfiguration());
  }

  @Override
  public void commitJob(JobContext jobContext, Seq<TaskCommitMessage> taskCommits) {
    // Nothing to move or mark: the checkpoints are the record, and the store's commit decides.
    // The number of partitions the job really ran (adaptive execution may differ from the plan).
    if (token != null && COMMITTED.containsKey(token)) {
      JOB_TASKS.put(token, taskCommits.size());
    }
  }

  @Override
  public void abortJob(JobContext jobContext) {
    // Each failed task deleted its own files; files of killed tasks are swept by the store's commit.
  }

  @Override
  public void setupTask(TaskAttemptContext taskContext) {
    if (token == null) {
      configure(taskContext.getConfiguration());
    }
    written = new ArrayList<>();
    startedNanos = System.nanoTime();
    if (fencePath != null && !fencePath.isEmpty()) {
      Path next = new Path(fencePath);
      try {
        if (next.getFileSystem(taskContext.getConfiguration()).exists(next)) {
          throw new IllegalStateException(
              "EpochFencedError: " + next + " exists: a newer submit owns the checkpoint store; this task attempt "
                  + "belongs to an old run (a zombie) and stops before writing anything");
        }
      } catch (IOException e) {
        // The store is unreachable: the driver's seal decides (it fences too).
      }
    }
  }

  @Override
  public String newTaskTempFile(TaskAttemptContext taskContext, Option<String> dir, String ext) {
    return newTaskTempFile(taskContext, dir, new FileNameSpec("", ext));
  }

  @Override
  public String newTaskTempFile(TaskAttemptContext taskContext, Option<String> dir, FileNameSpec spec) {
    TaskAttemptID attempt = taskContext.getTaskAttemptID();
    String random = UUID.randomUUID().toString().substring(0, 8);
    String name = String.format(
        "%spart-%05d-%s-a%d-%s%s",
        spec.prefix(), attempt.getTaskID().getId(), token, attempt.getId(), random, spec.suffix());
    Path parent = dir.isDefined() ? new Path(new Path(outputPath), dir.get()) : new Path(outputPath);
    String file = new Path(parent, name).toString();
    if (written == null) {
      written = new ArrayList<>();
    }
    written.add(file);
    return file;
  }

  @Override
  public String newTaskTempFileAbsPath(TaskAttemptContext taskContext, String absoluteDir, String ext) {
    throw new UnsupportedOperationException(
        "custom partition locations are not supported by airflow_ckpt_provider's writer");
  }

  @Override
  public String newTaskTempFileAbsPath(TaskAttemptContext taskContext, String absoluteDir, FileNameSpec spec) {
    throw new UnsupportedOperationException(
        "custom partition locations are not supported by airflow_ckpt_provider's writer");
  }

  @Override
  public TaskCommitMessage commitTask(TaskAttemptContext taskContext) {
    Configuration conf = taskContext.getConfiguration();
    TaskAttemptID attempt = taskContext.getTaskAttemptID();
    TaskContext spark = TaskContext.get();
    StringBuilder json = new StringBuilder();
    json.append("{\"partition\":").append(attempt.getTaskID().getId());
    json.append(",\"attempt\":").append(spark == null ? attempt.getId() : spark.attemptNumber());
    json.append(",\"task_attempt_id\":").append(spark == null ? -1 : spark.taskAttemptId());
    json.append(",\"stage\":").append(spark == null ? -1 : spark.stageId());
    json.append(",\"seconds\":").append(startedNanos == 0 ? 0.0 : (System.nanoTime() - startedNanos) / 1e9);
    json.append(",\"job\":");
    quote(json, jobId);
    json.append(",\"root\":");
    quote(json, new Path(outputPath).toString());
    json.append(",\"host\":");
    quote(json, hostName());
    json.append(",\"files\":[");
    List<String> files = written == null ? new ArrayList<>() : written;
    try {
      boolean first = true;
      for (String file : files) {
        Path path = new Path(file);
        FileSystem fs = path.getFileSystem(conf);
        long size = fs.getFileStatus(path).getLen();
        long rows = -1;
        if (file.endsWith(".parquet")) {
          rows = 0;
          @SuppressWarnings("deprecation")
          ParquetMetadata footer = ParquetFileReader.readFooter(conf, path);
          for (BlockMetaData block : footer.getBlocks()) {
            rows += block.getRowCount();
          }
          if (rows == 0 && fs.delete(path, false)) {
            // Spark writes a schema-only file when a job has no partition at all (everything was
            // skipped); the Arrow writer writes none, and a file without rows records nothing.
            continue;
          }
        }
        if (!first) {
          json.append(',');
        }
        first = false;
        json.append("{\"path\":");
        quote(json, file);
        json.append(",\"size\":").append(size).append(",\"rows\":").append(rows).append('}');
      }
    } catch (IOException e) {
      throw new RuntimeException("could not read back the files this task wrote: " + e, e);
    }
    json.append(']');
    written = new ArrayList<>();
    TaskKeys.Taken keys = TaskKeys.take(spark == null ? -1L : spark.taskAttemptId());
    if (keys == null) {
      json.append('}');
      return new TaskCommitMessage(json.toString());
    }
    json.append(",\"key_rows\":").append(keys.rows).append('}');
    return new TaskCommitMessage(new Object[] {json.toString(), keys.ipc});
  }

  @Override
  public void abortTask(TaskAttemptContext taskContext) {
    TaskContext spark = TaskContext.get();
    if (spark != null) {
      TaskKeys.discard(spark.taskAttemptId());
    }
    if (written == null) {
      return;
    }
    Configuration conf = taskContext.getConfiguration();
    for (String file : written) {
      Path path = new Path(file);
      for (int tries = 0; tries < 3; tries++) {
        try {
          path.getFileSystem(conf).delete(path, false);
          break;
        } catch (IOException e) {
          // Retry; what stays is an orphan the store's commit deletes (its intent is recorded).
        }
      }
    }
    written = new ArrayList<>();
  }

  @Override
  public void onTaskCommit(TaskCommitMessage message) {
    ConcurrentLinkedQueue<String> queue = COMMITTED.get(token);
    if (queue == null) {
      return;
    }
    Object obj = message.obj();
    if (obj instanceof String) {
      queue.add((String) obj);
      return;
    }
    // A row-keyed task: its keys go to a driver-local file (large; py4j would copy them slowly).
    Object[] parts = (Object[]) obj;
    String json = (String) parts[0];
    byte[] keys = (byte[]) parts[1];
    StringBuilder line = new StringBuilder(json.substring(0, json.length() - 1));
    try {
      java.nio.file.Path file = java.nio.file.Files.createTempFile(
          java.nio.file.Paths.get(keysDir == null ? System.getProperty("java.io.tmpdir") : keysDir),
          "keys-" + token + "-",
          ".arrows");
      java.nio.file.Files.write(file, keys);
      line.append(",\"keys_file\":");
      quote(line, file.toString());
    } catch (IOException e) {
      line.append(",\"keys_error\":");
      quote(line, e.toString());
    }
    line.append('}');
    queue.add(line.toString());
  }

  private static String hostName() {
    try {
      return java.net.InetAddress.getLocalHost().getHostName();
    } catch (IOException e) {
      return "";
    }
  }

  private static void quote(StringBuilder out, String text) {
    out.append('"');
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c == '"' || c == '\\') {
        out.append('\\').append(c);
      } else if (c < 0x20) {
        out.append(String.format("\\u%04x", (int) c));
      } else {
        out.append(c);
      }
    }
    out.append('"');
  }
}
